"""CEL text and Kubernetes quantities: pure functions over strings, below the engine and its doors.

celsyntax.py (the one CEL scanner and parser), celhelpers.py (the GPU helpers rewritten into plain
CEL), reads.py (the fields a CEL text reads, and the projection of a document onto them),
iterated.py (the collections a CEL text iterates), quantity.py (Kubernetes resource quantities).
The engine, export and authoring import these modules; this package imports nothing else of webhook
(tests/engine/test_api_boundary.py checks).
"""
