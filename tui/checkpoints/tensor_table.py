"""A checkpoint's tensors as a table (name, shape, dtype, bytes, role), or its name patterns
(count, pattern, shapes, bytes, role); and the filter and sort of a list of tensors."""

from rich.text import Text
from textual.widgets import DataTable

from ..display import format_shape, safe_text

SORT_KEYS = ("name", "size", "dtype")


def sort_tensors(tensors, sort_key):
    if sort_key == "size":
        return sorted(tensors, key=lambda t: (-(t.get("bytes") or 0), t["name"]))
    if sort_key == "dtype":
        return sorted(tensors, key=lambda t: (t.get("dtype") or "", t["name"]))
    return sorted(tensors, key=lambda t: t["name"])


def filter_tensors(tensors, text):
    needle = text.strip().lower()
    if not needle:
        return list(tensors)
    return [t for t in tensors if needle in t["name"].lower() or needle in (t.get("role") or "").lower()]


class TensorTable(DataTable):
    """Tensors or name patterns, a row each; rows are keyed by the name (or the pattern)."""

    def show_tensors(self, tensors):
        self.clear(columns=True)
        # The role is a sentence: last, so that shape, dtype and bytes stay on an 80-column screen.
        self.add_column("name", key="name")
        self.add_column("shape", key="shape")
        self.add_column("dtype", key="dtype")
        self.add_column(Text("bytes", justify="right"), key="bytes")
        self.add_column("role", key="role")
        self.add_tensors(tensors)

    def add_tensors(self, tensors):
        for tensor in tensors:
            self.add_row(
                Text(safe_text(tensor["name"])),  # Text, not str: a str cell would be read as markup
                Text(format_shape(tensor.get("shape") or [])),
                Text(safe_text(tensor.get("dtype"))),
                Text("{:,}".format(tensor.get("bytes") or 0), justify="right"),
                Text(safe_text(tensor.get("role")), style="dim" if not tensor.get("role") else ""),
                key=tensor["name"],
            )

    def show_groups(self, groups):
        self.clear(columns=True)
        self.add_column(Text("count", justify="right"), key="count")
        self.add_column("pattern", key="pattern")
        self.add_column("shape", key="shape")
        self.add_column(Text("bytes", justify="right"), key="bytes")
        self.add_column("role", key="role")
        for group in groups:
            shapes = ", ".join(format_shape(s) for s in group.get("shapes") or []) + (", ..." if group.get("more_shapes") else "")
            self.add_row(Text("{:,}".format(group["count"]), justify="right"), Text(safe_text(group["pattern"])), Text(shapes),
                         Text("{:,}".format(group.get("bytes") or 0), justify="right"), Text(safe_text(group.get("role"))),
                         key=group["pattern"])
