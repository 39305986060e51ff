"""Fit the per-operator cost model on the shipped kernel table; write `perfmodel/data/kernels/opcost.json`.

python bench/fit_opcost.py            # deterministic: the same table gives the same file
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from perfmodel.kernels import read_kernel_rows, write_cost_model
from perfmodel.opcost import fit


def main() -> int:
    model = fit(read_kernel_rows())
    out = write_cost_model(model)
    for name, m in sorted(model.classes.items()):
        floors = ", ".join(f"{s.split('@')[0]} {f * 1e6:.1f} us" for s, f in m.floors_s)
        print(f"{name:14s} rows {m.rows:6d}  in-step floor {m.launch_s * 1e6:5.2f} us  (sources: {floors})")
    print(f"-> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
