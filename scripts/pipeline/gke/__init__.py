"""`tpu-rl run`, `cancel`, `status` and `logs` on GKE: one JobSet per step, submitted in order, waited for,
followed, its output verified in GCS, and its failures explained in one line each.

- steps.py: each step's JobSet (name, manifest, main pod) and the kubelet's times, shared by the rest.
- plan.py: what `run` does with each step (skip, attach, submit, replace), decided before anything is
  submitted, and the dry run that shows it.
- submit.py: `run`: the token Secret, the submissions in order, the run record.
- wait.py: waiting for one JobSet: problems, restarts, progress, the followed log.
- diagnose.py: why a step failed, in one line.
- cancel.py: `cancel`.
- evaluate.py: `eval`: a saved checkpoint scored on the held-out set by a scratch run's JobSet.
- status.py: `status` and `logs`.
- driver.py, attach.py, detach.py: the run's driver in the cluster (jobs/driver.py): `run` starts or
  finds it and follows it (attach.py), or returns at once (detach.py: `run --detach`, a sweep's runs);
  drive (Platform.drive) is what it runs, submit.py's pipeline.

Nothing is imported here: each command imports the module it runs, and only when it runs.
"""
