"""The base layer: what every other layer may use and that uses none of them.

Errors a user can cause, element types, the size grammar, a run configuration,
the machine's fingerprint, exact inputs, and the one reader and writer of the
files a user names. Nothing here knows a collective, a program or a backend."""
