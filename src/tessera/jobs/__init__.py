"""Jobs: what users submit (JobSpec) — model, batch, work and preferences, never a GPU assignment."""

from tessera.jobs.spec import JOBSPEC_VERSION, JobSpec, JobSpecError, load_job, parse_job

__all__ = ["JOBSPEC_VERSION", "JobSpec", "JobSpecError", "load_job", "parse_job"]
