"""What things cost, from list prices: estimates for one default region, and every output says so.

- prices.py: the list prices of prices.toml, read once and checked, and how a dollar amount prints;
- run.py: what a recipe's stack costs per hour and one pipeline run costs, its evaluation's part included
  (runs/evaluation.py sizes the evaluation);
- train_time.py: how long a run's train step is expected to take;
- standing.py: what a GKE stack bills while no run is active (the one account every output gives), and the
  TPU time a step bills idle;
- consent.py: when `run` and `sweep` ask before they spend, and what stands for a yes without a terminal.
"""
