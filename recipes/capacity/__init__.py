"""Capacity: the ways of getting TPUs, and where a recipe's slices come from.

- modes.py: CapacityMode and every rule the code decides on a mode by (MODE_RULES), the rules of a
  capacity list on a platform and how long `run` waits for each mode;
- placement.py: each capacity mode of a GKE recipe's list in each zone of ZONE, in fallback order.
"""
