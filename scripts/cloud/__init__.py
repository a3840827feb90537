"""Talking to the clouds: every client, and what the pipeline and preflight ask of them.

- clients.py: builds each Google and Kubernetes client (the only place; tests redirect the endpoints).
- kubeconfig.py: reaching the cluster: the settings' own kubeconfig context, or the driver pod's account.
- cluster.py: the cluster's API as tpu-rl calls it: the token Secret, JobSets, Kueue's objects, pods, logs.
- driver_job.py: the run's driver, a batch Job: created, read, deleted with its pod.
- jobsets.py: what JobSet and pod objects say (pure); kueue.py: what Workloads and ProvisioningRequests say.
- gcs.py: the outputs each step must leave in the bucket, and whether they are there.
- hf_token.py: the Hugging Face token in Secret Manager.
- deletion.py: deleting with every DeleteOption in the body, and the bounded wait until the pods are gone.
- retry.py: applies recipes/outcome.py's retry policy to Kubernetes calls: what is repeated, how often.
- foreign.py: the libraries' own exceptions, past our handling, as the outcomes they are (by type).
- reach.py: the first contact with an endpoint (bucket, cluster, Compute, TPU, Secret Manager): said when
  slow, given up after a bound.

Nothing is imported here: `tpu-rl --help` and the offline commands never load these clients.
"""
