"""Policies as Kubernetes objects: GPUPolicy, GPUPolicyOverlay and GPUPolicyException in the cluster.

- isolation.py: the load in which a broken object is the only one left out (and the others serve);
- admission.py: the check behind the `policies.gpu-webhook.io` validating webhook (a broken policy is
  refused at apply, with the loader's and lint's messages and field paths);
- status.py: each replica's view of each object written into its status (conditions, byPod).

The watch caches that read them are in webhook/kube/policies.py, each object as a loader document (the
same loader as the rule files, its errors sorted back to the objects) in webhook/kube/policyobjects.py;
the CRDs' names in webhook/engine/policyresources.py, the CRDs in webhook/install/crds.py.
"""
