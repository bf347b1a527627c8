"""Blob stores: where artifact bytes live, addressed by (namespace, SHA-256).

A blob store knows nothing about artifacts, scopes or manifests. It writes bytes
privately, makes them durable, publishes them under their digest, and reads
them back. Hashing and verification belong to the vault, which checks every
byte a store returns against digests held in the catalog.
"""

from refvault.blobs.base import BlobKey, BlobReader, BlobStore, BlobWriter

__all__ = ["BlobKey", "BlobReader", "BlobStore", "BlobWriter"]
