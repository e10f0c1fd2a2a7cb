"""The uses of an integer input told apart by the name of what uses it: ``synthesize.IndexUses``
follows them to plan the input's values, and ``ls``'s scan (``formats/scan.shard_rank``) sends a
printed graph whose integer input has one of them to the full reader. Without torch, so that
both read the same lists."""

SAME_VALUES_METHODS = frozenset({
    "view", "reshape", "flatten", "unsqueeze", "squeeze", "contiguous", "long", "int", "to", "clone", "expand", "expand_as",
    "repeat", "t", "permute", "transpose", "narrow", "select", "view_as", "reshape_as", "detach", "type", "cuda", "cpu"})
SAME_VALUES_FUNCTIONS = frozenset({
    "flatten", "reshape", "squeeze", "unsqueeze", "clone", "narrow", "select", "t", "permute", "transpose", "detach",
    "contiguous", "_to_copy", "view", "_unsafe_view", "expand", "slice", "alias", "repeat"})
INDEX_METHODS = frozenset({  # t.index_select(dim, x): x indexes t along dim
    "index_select", "gather", "index_add", "index_add_", "index_copy", "index_copy_", "index_fill", "index_fill_", "scatter",
    "scatter_", "scatter_add", "scatter_add_"})
INDEX_FUNCTIONS = frozenset({"index_select", "gather", "index_add", "index_copy", "scatter", "scatter_add"})
SUBSCRIPT_METHODS = frozenset({"index_put", "index_put_"})  # t.index_put_((x,), v)
SUBSCRIPT_FUNCTIONS = frozenset({"getitem", "setitem", "index", "index_put", "index_put_", "_index_put_impl_"})  # t[x]
SHIFTS = frozenset({"add", "sub", "iadd", "isub"})  # x + c: the same values shifted
# every use IndexUses follows (embedding(x, weight): x indexes weight's rows)
FOLLOWED_METHODS = SAME_VALUES_METHODS | INDEX_METHODS | SUBSCRIPT_METHODS
FOLLOWED_FUNCTIONS = SAME_VALUES_FUNCTIONS | INDEX_FUNCTIONS | SUBSCRIPT_FUNCTIONS | {"embedding"}
FLIPPED = {"ge": "le", "gt": "lt", "lt": "gt", "le": "ge"}  # the comparisons, and each as its operands swapped read it
