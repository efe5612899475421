"""Policies as Kubernetes objects: GPUPolicy, GPUPolicyOverlay and GPUPolicyException in the cluster.

- objects.py: a policy object as a loader document (the same loader as the rule files), and the
  loader's errors sorted back to the objects they are about;
- isolation.py: the load in which a broken object is the only one left out (and the others serve);
- admission.py: the check behind the `policies.gpu-webhook.io` validating webhook (a broken policy is
  refused at apply, with the loader's and lint's messages and field paths);
- status.py: each replica's view of each object written into its status (conditions, byPod).

The watch caches that read them are in webhook/kube/policies.py; the CRDs in webhook/install/crds.py.
"""
