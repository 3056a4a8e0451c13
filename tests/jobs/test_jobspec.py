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
