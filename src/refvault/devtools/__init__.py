"""Development checks run by ``make check`` and the tests, never imported by refvault at run time.

* :mod:`refvault.devtools.ref_sites`: resolved Ref values have exactly one production site
  (``python -m refvault.devtools.ref_sites``).
"""
