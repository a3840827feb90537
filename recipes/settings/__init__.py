"""Per-user settings: where things go in the user's cloud (docs/settings.md).

- load.py: the Settings a command gets, read from the environment and the optional config file;
- specs.py: which settings exist (variable, config key, default, the example) and which each command needs;
- where.py: the groups of settings that find a thing (the bucket, the cluster, the VM), for each platform's needs;
- checks.py: the check of every value, AUTHORIZED_CIDR's rules among them;
- tuning.py: how long tpu-rl polls, backs off and waits (environment only, each with its default).
"""
