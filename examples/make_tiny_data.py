"""Writes the tiny local dataset and tokenizer that `examples/tiny-gpt-data.yaml` trains on (both are shipped;
run this to rebuild them). Nothing is downloaded: the documents are the lines of `data/corpus.txt` plus short
generated sentences, and the BPE tokenizer is trained on them with the `tokenizers` library, its vocabulary
small enough (≤ 128 ids) for the zoo's `gpt-tiny`.

    python examples/make_tiny_data.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = Path(__file__).parent / "data"


def documents() -> list[str]:
    lines = [line.strip() for line in (HERE / "corpus.txt").read_text().splitlines() if line.strip()]
    rng = random.Random(0)
    jobs, cards, verbs = (
        ["job", "model", "run"],
        ["old card", "new card", "small node"],
        ["waits", "trains", "moves"],
    )
    made = [
        f"The {rng.choice(jobs)} {rng.choice(verbs)} on the {rng.choice(cards)} for {rng.randint(2, 90)} steps."
        for _ in range(240)
    ]
    return lines + made


def main() -> None:
    docs = documents()
    (HERE / "tiny_corpus.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(docs, trainers.BpeTrainer(vocab_size=128, special_tokens=["<unk>", "</s>"]))
    tok.save(str(HERE / "tiny_tokenizer.json"))
    print(f"{len(docs)} documents, vocabulary {tok.get_vocab_size()}: {HERE}")


if __name__ == "__main__":
    main()
