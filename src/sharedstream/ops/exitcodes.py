"""The exit codes of every ``sharedstream`` command, a contract (docs/operations.md).

Their own module, importing nothing, so ``run`` and ``deliver`` can name them without
loading :mod:`sharedstream.ops.clitools` (which loads rich for the operator commands'
tables; a long-running process never prints one).
"""

EXIT_FAILURE = 1  # a runtime failure: a broker or database that does not answer
EXIT_USAGE = 2  # a usage or configuration error: retrying cannot help
