"""conveyor-testkit: the conformance kit a carrier author runs against their carrier.

The kit is a pytest plugin (entry point ``pytest11``) plus the test modules in this package::

    pytest --pyargs conveyor_testkit --conveyor-carrier=NAME

It checks the dispatch contract, the consistency of the carrier's advertised capabilities with
the central dtype-policy registry, and that every advertised plan executes and matches the
Generic oracle. See ``docs/conformance.md``.
"""

__all__: list[str] = []
