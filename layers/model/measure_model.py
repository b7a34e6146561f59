#!/usr/bin/env python3
"""Measure the exported model as the agent runs it: load time, inference time, accuracy.

Runs in the project's virtualenv (onnxruntime + tokenizers + numpy, no PyTorch)::

    ORT_DISABLE_TELEMETRY=1 .venv/bin/python layers/model/measure_model.py [--model-dir DIR]

Prints one JSON object:

- ``cold``: medians over ``--processes`` fresh Python processes (each loads the model once,
  as a cold start does) of ``import_ms`` (numpy + onnxruntime + tokenizers), ``load_ms``
  (tokenizer + ``InferenceSession``) and ``first_embed_ms`` (first one-sentence embed);
- ``warm``: in one process, the median and p90 of ``--runs`` one-sentence embeds after 5
  warm-up calls, the time to embed the 74 example phrases of ``intents.json``
  (``IntentClassifier`` build) and one ``lexical_classify`` call;
- ``reference``: cosine min / mean of this model against the fp32 PyTorch reference
  embeddings stored beside the default artifact.

All timings use ``intra_op_threads`` = ``--threads`` (default 1, as in Lambda). Timings on a
shared machine vary with its load; compare variants within one run of this script.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SENTENCE = "Where is my order? It was supposed to arrive yesterday."

_COLD = """
import json, sys, time
from pathlib import Path
from functions.intent_model.model import EmbeddingModel
model = EmbeddingModel.load(Path(sys.argv[1]), intra_op_threads=int(sys.argv[2]))
started = time.perf_counter()
model.embed([sys.argv[3]])
first_ms = (time.perf_counter() - started) * 1e3
print(json.dumps({"import_ms": model.import_ms, "load_ms": model.load_ms,
                  "first_embed_ms": first_ms}))
"""


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO_ROOT))
    from functions.agent import model as m

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, default=m.REPO_MODEL_DIR)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args(argv)

    import numpy as np

    cold = []
    for _ in range(args.processes):
        out = subprocess.run(
            [sys.executable, "-c", _COLD, str(args.model_dir), str(args.threads), SENTENCE],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        cold.append(json.loads(out.stdout))

    model = m.EmbeddingModel.load(args.model_dir, intra_op_threads=args.threads)
    for _ in range(5):
        model.embed([SENTENCE])
    runs = []
    for _ in range(args.runs):
        started = time.perf_counter()
        model.embed([SENTENCE])
        runs.append((time.perf_counter() - started) * 1e3)
    intents = m.load_intents()
    classifier = m.IntentClassifier(model, intents)
    started = time.perf_counter()
    m.lexical_classify(SENTENCE, intents)
    lexical_ms = (time.perf_counter() - started) * 1e3

    record = json.loads((m.REPO_MODEL_DIR / "reference_embeddings.json").read_text("utf-8"))
    reference = np.asarray(record["embeddings"], dtype=np.float32)
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    cosines = (model.embed(record["sentences"]) * reference).sum(axis=1)

    def median(key: str) -> float:
        return round(float(statistics.median(c[key] for c in cold)), 1)

    result = {
        "model_dir": str(args.model_dir),
        "model_onnx_mb": round((args.model_dir / m.MODEL_FILE).stat().st_size / 1e6, 1),
        "threads": args.threads,
        "cold": {
            "processes": args.processes,
            "import_ms": median("import_ms"),
            "load_ms": median("load_ms"),
            "first_embed_ms": median("first_embed_ms"),
        },
        "warm": {
            "embed_one_median_ms": round(statistics.median(runs), 2),
            "embed_one_p90_ms": round(float(np.percentile(runs, 90)), 2),
            "runs": args.runs,
            "classifier_build_ms": round(classifier.build_ms, 1),
            "examples": sum(len(v) for v in intents.values()),
            "lexical_classify_ms": round(lexical_ms, 2),
        },
        "reference": {
            "sentences": len(cosines),
            "cosine_min": round(float(cosines.min()), 4),
            "cosine_mean": round(float(cosines.mean()), 4),
            "worst": record["sentences"][int(np.argmin(cosines))][:40],
        },
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
