"""The run's in-cluster driver, as data (issue 27).

- access.py: what it may do in the cluster: the rules of its namespaced Role;
- runtime.py: what it runs on: a pinned image and the wheels locked in driver_lock.toml (written by
  tools/lock_driver.py).
"""
