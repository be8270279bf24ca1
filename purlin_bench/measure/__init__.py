"""The one measurement service: checked outputs and times on any backend, through the port.

It turns (collective, size,
configuration) into checked outputs and times on any backend through the
port (service.py), and how outputs are compared with the reference
(compare.py). Check, bench, tune and the tune guard all come through here."""
