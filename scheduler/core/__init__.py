"""Pure scheduling core: types, protocols, placement, planning and ``run_round``. No I/O, no clock."""
