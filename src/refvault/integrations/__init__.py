"""Shells that connect refvault to agent frameworks and protocols, one subpackage each.

Each integration imports its framework lazily (it is an optional extra), so
``import refvault`` never needs any of them.
"""
