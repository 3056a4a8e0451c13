import pytest

from tessera.jobs import JobSpecError, load_job, parse_job

BASE = {"model": "gpt-tiny", "global_batch": 8, "steps": 10}


def test_minimal_spec_defaults():
    j = parse_job(BASE)
    assert j.total_steps == 10 and j.precision == "bf16" and j.max_gpus is None


def test_samples_become_steps():
    assert parse_job({**BASE, "steps": None, "samples": 81}).total_steps == 11


@pytest.mark.parametrize(
    "change, field",
    [
        ({"global_batch": 0}, "global_batch"),
        ({"steps": None}, "steps or samples"),
        ({"gpus": 4}, "'gpus' is not allowed"),
        ({"num_gpus": 4}, "'num_gpus' is not allowed"),
        ({"precision": "fp8"}, "precision"),
        ({"gpu_types": ["A99"]}, "gpu_types: unknown GPU type 'A99'"),
        ({"gpu_types": ["A10"], "exclude_gpu_types": ["A10"]}, "both preferred and excluded"),
        ({"colour": "red"}, "colour"),
        ({"version": 2}, "version"),
        ({"model": "lama2-7b"}, "model: .*llama2-7b"),
        # longer than any file name (ENAMETOOLONG): an unknown model, not an OSError (found by schemathesis)
        ({"model": "Ṱ̺̺̕o͞ " * 60}, "model: unknown model"),
        ({"model": "a\x00b"}, "model: unknown model"),
    ],
)
def test_bad_specs_name_the_field(change, field):
    with pytest.raises(JobSpecError, match=field.replace("(", r"\(")):
        parse_job({**BASE, **change})


def test_load_yaml_and_json(tmp_path):
    y = tmp_path / "j.yaml"
    y.write_text("model: gpt-tiny\nglobal_batch: 4\nsteps: 3\ngpu_types: [a100]\n")
    assert load_job(y).gpu_types == ("A100-40GB",)
    bad = tmp_path / "j.json"
    bad.write_text("{not json")
    with pytest.raises(JobSpecError, match="not valid JSON"):
        load_job(bad)
    with pytest.raises(JobSpecError, match="cannot read"):
        load_job(tmp_path / "missing.yaml")


@pytest.mark.parametrize(
    "change, field",
    [
        ({"steps": "10"}, "steps"),
        ({"steps": True}, "steps"),
        ({"global_batch": 8.0}, "global_batch"),
        ({"learning_rate": float("nan")}, "learning_rate"),
        ({"learning_rate": float("inf")}, "learning_rate"),
        ({"learning_rate": "0.1"}, "learning_rate"),
        ({"deadline_s": float("inf")}, "deadline_s"),
        ({"priority": "1"}, "priority"),
        ({"wait_for_resources": "yes"}, "wait_for_resources"),
    ],
)
def test_numbers_are_strict_and_finite(change, field):
    with pytest.raises(JobSpecError, match=field):
        parse_job({**BASE, **change})


def test_integers_are_accepted_where_floats_are_meant():
    j = parse_job({**BASE, "learning_rate": 1, "deadline_s": 3600})
    assert j.learning_rate == 1.0 and j.deadline_s == 3600.0 and not j.wait_for_resources


def test_unknown_field_suggests_the_nearest():
    with pytest.raises(JobSpecError, match="unknown field 'step'; did you mean 'steps'"):
        parse_job({"model": "gpt-tiny", "global_batch": 8, "step": 10})
    with pytest.raises(JobSpecError, match="learning_rat.*did you mean 'learning_rate'"):
        parse_job({**BASE, "learning_rat": 0.1})


def test_yaml_numbers_stay_numbers(tmp_path):
    """YAML 1.1 reads ``3e-4`` as a string; the loader reads it as the float YAML 1.2 (and everyone) means."""
    y = tmp_path / "j.yaml"
    y.write_text("model: gpt-tiny\nglobal_batch: 4\nsteps: 30\nlearning_rate: 3e-4\ndeadline_s: 1.5e3\n")
    j = load_job(y)
    assert j.steps == 30 and j.learning_rate == 3e-4 and j.deadline_s == 1500.0
    y.write_text('model: gpt-tiny\nglobal_batch: 4\nsteps: "30"\n')
    with pytest.raises(JobSpecError, match="steps"):
        load_job(y)
    y.write_text("model: gpt-tiny\nglobal_batch: 4\nsteps: 3\nlearning_rate: .nan\n")
    with pytest.raises(JobSpecError, match="learning_rate"):
        load_job(y)


def test_every_example_spec_still_loads():
    from pathlib import Path

    examples = Path(__file__).resolve().parents[2] / "examples"
    jobs = [p for p in sorted(examples.rglob("*.yaml")) if "node_groups" not in p.read_text()]
    assert len(jobs) >= 5 and all(load_job(p).total_steps >= 1 for p in jobs)


def test_a_model_name_with_an_unknown_users_home_is_an_unknown_model():
    """``~nosuchuser/x`` made pathlib raise RuntimeError (no such home) and the API answer 500 (schemathesis)."""
    with pytest.raises(JobSpecError, match="unknown model"):
        parse_job({"model": "~nosuchuser/x", "global_batch": 8, "steps": 3})


def test_a_hugging_face_model_directory_beside_the_spec_resolves_against_its_folder(tmp_path):
    """`model: tiny-llama` in a spec names the directory beside the spec (config.json inside), wherever the user
    runs the command from; a zoo name stays as written."""
    from tessera.jobs import load_job

    (tmp_path / "tiny-llama").mkdir()
    (tmp_path / "tiny-llama" / "config.json").write_text("{}")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: j\nmodel: tiny-llama\nglobal_batch: 8\nsteps: 4\n")
    assert load_job(spec).model == str((tmp_path / "tiny-llama").resolve())
    spec.write_text("name: j\nmodel: gpt-tiny\nglobal_batch: 8\nsteps: 4\n")
    assert load_job(spec).model == "gpt-tiny"
