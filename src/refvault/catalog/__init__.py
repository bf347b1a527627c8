"""Catalogs: the trusted manifest store (artifacts, blob records, idempotency keys).

The catalog is the only source of provenance, scope, omissions and expiry, and
of the digests every read is verified against. Nothing a model sends can write
to it except through :meth:`refvault.Vault.put`.
"""

from refvault.catalog.base import BlobRecord, Catalog, Manifest, Publication

__all__ = ["BlobRecord", "Catalog", "Manifest", "Publication"]
