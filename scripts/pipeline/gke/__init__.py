"""`tpu-rl run`, `cancel`, `status` and `logs` on GKE: one JobSet per step, submitted in order, waited for,
followed, its output verified in GCS, and its failures explained in one line each.

- platform.py: PLATFORM, GKE's implementation of the Platform protocol, handing each command to its module.
- steps.py: each step's JobSet (name, manifest, main pod) and the kubelet's times, shared by the rest.
- plan.py: what `run` does with each step (skip, attach, submit, replace), decided before anything is
  submitted, and the dry run that shows it.
- submit.py: `run`: the token Secret, the submissions in order, the run record.
- wait.py: waiting for one JobSet: a poll at each tick (observation.py) that its observers answer:
  observers.py (problems, restarts, the waits before it runs, phases, the lines shown, its end) and
  output.py (the head's log read, train's progress, the stall bound); the followed log.
- admission.py: what a waiting JobSet really waits for: its Kueue Workload and, on flex-start, the
  ProvisioningRequest for its slice, bounded by the mode's CAPACITY_WAIT.
- queue.py: Kueue's queue of our runs: who holds the quota, who waits behind whom, in Kueue's order.
- capacity.py: capacity that does not come or goes away: the next mode, the step again, or one line.
- starting.py: an attempt with its capacity that cannot start: an image pull failing, pods not Ready.
- detach.py: starting a run that nobody follows (`run --detach`, each run of a sweep).
- driver_image.py, driver_wheel.py: the driver's runtime: this package's wheel and its locked
  dependencies staged in the bucket, and the version a driver reports.
- diagnose.py: why a step failed, in one line.
- cancel.py: `cancel`; shared_convert.py: which run may delete a conversion JobSet runs share.
- billing.py: what an idle cluster still bills, for `runs` when no run is active or queued.
- down.py: `down`: the recipe's stack destroyed once no run is active, the bucket kept.
- evaluate.py: `eval`: a saved checkpoint scored on the held-out set by a scratch run's JobSet.
- eval_cost.py: the most an evaluation can bill, weighed before any cloud library loads.
- status.py: `status` and `logs`; log_stream.py: a log read again or followed from the last line shown,
  a dropped stream reopened, bounded.
- driver.py, attach.py, detach.py: the run's driver in the cluster (jobs/driver.py): `run` starts or
  finds it and follows it (attach.py), or returns at once (detach.py: `run --detach`, a sweep's runs);
  drive (Platform.drive) is what it runs, submit.py's pipeline.
- system_room.py: a sweep's drivers on the system pool: how many fit, read from the cluster, and the
  price of the nodes its autoscaler adds for the others.
- driver_start.py: a driver pod that has not started: why, in the API's words, and the bound on it.

Nothing is imported here: each command imports the module it runs, and only when it runs.
"""
