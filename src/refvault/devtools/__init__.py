"""Development checks run by ``make check`` and the tests, never imported by refvault at run time.

* :mod:`refvault.devtools.ref_sites`: resolved Ref values have exactly one production site
  (``python -m refvault.devtools.ref_sites``).
* :mod:`refvault.devtools.tools_doc`: renders ``docs/tools.md`` from the model's tool schemas and the query
  operators (``python -m refvault.devtools.tools_doc``; ``--check`` compares).
"""
