"""Contract checks used by the tests: MaxText's config schema, the Kubernetes and JobSet schemas, the seeds."""
