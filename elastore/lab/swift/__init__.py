"""The Swift lab: a real OpenStack Swift cluster in a network namespace (``lab``), its load
generator's client (``load``) and the sweeps measured on it (``profile``)."""
