"""The old name of ``graphdbg.store.gate`` (reads inside a dump); kept so that imports stay valid."""

from graphdbg.store.gate import check_name, inside, read_inside, read_regular, regular_file

__all__ = ["inside", "read_inside", "read_regular", "regular_file", "check_name"]
