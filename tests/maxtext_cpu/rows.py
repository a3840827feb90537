"""What MaxText's own data pipeline makes of gsm8k rows, for tests/test_cli_rewards.py. Runs inside a
MaxText test venv:

    python tests/maxtext_cpu/rows.py OUT_DIR CASES_JSON

CASES_JSON: {"rows": [gsm8k rows], "cases": [{"model": MAXTEXT_NAME, "data_template": FILE_NAME,
"processor": PATH or null}]}. For each case: the tiny tokenizer of the model (tiny.py, with its chat
template) saved and loaded again with AutoTokenizer.from_pretrained, as train_rl loads tokenizer_path;
the data template loaded with load_data_template_from_file from the wheel's examples/chat_templates; a
tmvp_config with rl.yml's four tokens; utils_rl.process_data, or the file's process_data loaded with
utils_rl.load_custom_callable; grain's MapDataset.map and IterDataset.batch, as train_rl.prepare_datasets
does. Prints one JSON line: per case, the tokenizer directory, the batch's rows and each column's type.
"""

from __future__ import annotations

import json
import multiprocessing.pool  # noqa: F401  (utils_rl's math_verify_pool annotates with it before importing it)
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main(out: Path, spec: dict) -> dict:
    import grain
    import maxtext
    import yaml
    from maxtext.input_pipeline.instruction_data_processing import load_data_template_from_file
    from maxtext.trainers.post_train.rl import utils_rl
    from tiny import _tokenizer
    from transformers import AutoTokenizer

    package = Path(maxtext.__file__).parent
    rl = yaml.safe_load((package / "configs" / "post_train" / "rl.yml").read_text())

    class Config:
        reasoning_start_token = rl["reasoning_start_token"]
        reasoning_end_token = rl["reasoning_end_token"]
        solution_start_token = rl["solution_start_token"]
        solution_end_token = rl["solution_end_token"]

    results = []
    for index, case in enumerate(spec["cases"]):
        directory = out / f"tokenizer-{index}-{case['model']}"
        built, _ = _tokenizer(case["model"])
        built.save_pretrained(directory)
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
        template = load_data_template_from_file(str(package / "examples" / "chat_templates" / case["data_template"]))
        process = (utils_rl.load_custom_callable(case["processor"], "process_data") if case.get("processor")
                   else utils_rl.process_data)
        dataset = grain.MapDataset.source(spec["rows"]).map(
            lambda x: process(rl["dataset_name"], tokenizer, template, Config, x))
        batch = next(iter(dataset.to_iter_dataset().batch(len(spec["rows"]), drop_remainder=True)))
        rows = [{key: str(column[i]) for key, column in batch.items()} for i in range(len(spec["rows"]))]
        types = {key: [type(column).__name__, getattr(getattr(column, "dtype", None), "kind", None)]
                 for key, column in batch.items()}
        results.append({"tokenizer": str(directory), "rows": rows, "types": types})
    return {"cases": results, "dataset_name": rl["dataset_name"]}


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), json.loads(sys.argv[2]))))
