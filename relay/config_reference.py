"""The configuration reference table of the README, generated from the schema.

    python3 -m relay.config_reference      # prints the Markdown table
"""

from __future__ import annotations

from .config import iter_options


def reference_table() -> str:
    lines = ["| key | type | default | environment | meaning |", "|---|---|---|---|---|"]
    for option in iter_options():
        if option.type == "mapping" and not option.env:
            continue
        env = f"`{option.env}`" if option.env else ""
        lines.append(f"| `{option.path}` | {option.type} | {option.default or ''} | {env} | {option.doc} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(reference_table())
