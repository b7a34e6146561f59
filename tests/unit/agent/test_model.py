"""Tests of functions/intent_model/model.py (shared by the intent agent and the GPU endpoint)
against the real int8 ONNX artifact (no mocks).

The model is loaded once per module; every test that needs inference shares it.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np
import pytest

from functions.intent_model import model as m

ARTIFACT = m.REPO_MODEL_DIR
REFERENCE = json.loads((ARTIFACT / "reference_embeddings.json").read_text(encoding="utf-8"))

# Paraphrases written for these tests, none of them an example phrase of intents.json
# (checked by test_held_out_phrases_are_not_examples). Measured when written: model 40/40,
# lexical fallback 32/40.
HELD_OUT: dict[str, list[str]] = {
    "check_order_status": [
        "Any update on where my shipment is?",
        "I ordered a week ago and nothing has come yet",
        "Could you tell me when my package will be delivered?",
        "Track order 98765 for me",
        "Has the courier picked up my stuff?",
    ],
    "cancel_order": [
        "Please don't send my order, I want to cancel it",
        "Is it too late to cancel what I bought this morning?",
        "Scrap the order I placed yesterday",
        "I'd like to withdraw my purchase before it is dispatched",
        "I bought this by mistake, void the order",
    ],
    "refund_request": [
        "I returned the shoes, where is my money?",
        "Give me a refund for the damaged blender",
        "I'd like to be paid back for the faulty item",
        "How long do refunds take to process?",
        "You billed me two times, I want that money returned",
    ],
    "billing_question": [
        "What am I paying for each month?",
        "There's a charge on my statement I don't recognise",
        "How do I download my invoices?",
        "Is VAT included in the price?",
        "When will my card be charged next?",
    ],
    "technical_support": [
        "The app freezes when I open it",
        "Something is broken, the site gives me an error message",
        "I can't sign in, it says my password is wrong",
        "The site is down for me",
        "Videos won't play in the app",
    ],
    "account_update": [
        "I need to update the email on my profile",
        "How can I change my delivery address?",
        "Please remove my account and all my data",
        "Edit my name on the account",
        "Set a new mobile number on my profile",
    ],
    "talk_to_human": [
        "Can I chat with a live agent please?",
        "I'd rather talk to someone from your team",
        "Stop the bot, get me a person",
        "Is there a phone number to reach a human?",
        "Escalate this to a supervisor",
    ],
    "greeting": ["hiya", "hello there!", "good afternoon", "hey, hi", "morning!"],
}
MODEL_ACCURACY_FLOOR = 0.90  # measured 1.00 (40/40); room for ORT/CPU kernel differences
LEXICAL_ACCURACY_FLOOR = 0.65  # measured 0.80 (32/40); a degraded answer, still far above 1/8


@pytest.fixture(scope="module")
def model() -> m.EmbeddingModel:
    return m.EmbeddingModel.load(ARTIFACT, intra_op_threads=1)


@pytest.fixture(scope="module")
def intents() -> dict[str, list[str]]:
    return m.load_intents()


@pytest.fixture(scope="module")
def classifier(model: m.EmbeddingModel, intents: dict[str, list[str]]) -> m.IntentClassifier:
    return m.IntentClassifier(model, intents)


def _accuracy(classify: Callable[[str], m.IntentResult]) -> float:
    pairs = [(want, text) for want, texts in HELD_OUT.items() for text in texts]
    return sum(classify(text).intent == want for want, text in pairs) / len(pairs)


# --- the artifact --------------------------------------------------------------------------


def test_artifact_holds_only_run_time_files() -> None:
    names = {p.name for p in ARTIFACT.iterdir()}
    assert names == {"model.onnx", "tokenizer.json", "LICENSE", "reference_embeddings.json"}
    assert "Apache License" in (ARTIFACT / "LICENSE").read_text(encoding="utf-8")


def test_reference_was_recorded_for_this_model_file() -> None:
    digest = hashlib.sha256((ARTIFACT / "model.onnx").read_bytes()).hexdigest()
    assert REFERENCE["onnx"]["sha256"] == digest
    assert REFERENCE["embedding"]["dim"] == m.EMBEDDING_DIM
    assert REFERENCE["tokenizer"]["max_seq_length"] == m.MAX_SEQ_TOKENS
    assert len(REFERENCE["sentences"]) == len(REFERENCE["embeddings"]) >= 10


def test_int8_model_matches_fp32_pytorch_reference(model: m.EmbeddingModel) -> None:
    reference = np.asarray(REFERENCE["embeddings"], dtype=np.float32)
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    got = model.embed(REFERENCE["sentences"])
    cosines = (got * reference).sum(axis=1)
    worst = int(np.argmin(cosines))
    assert cosines.min() >= 0.99, (REFERENCE["sentences"][worst], float(cosines.min()))
    assert cosines.mean() >= 0.995


def test_reference_set_exercises_truncation() -> None:
    assert max(REFERENCE["token_counts"]) == m.MAX_SEQ_TOKENS


# --- embeddings ----------------------------------------------------------------------------


def test_embeddings_have_shape_dtype_and_unit_norm(model: m.EmbeddingModel) -> None:
    texts = ["where is my order", "hi", "The app crashes when I upload a photo."]
    out = model.embed(texts)
    assert out.shape == (3, 384)
    assert out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert model.load_ms > 0


def test_similar_meaning_is_closer_than_unrelated(model: m.EmbeddingModel) -> None:
    a, b, c = model.embed(["where is my parcel", "has my package shipped", "reset my password"])
    assert float(a @ b) > float(a @ c) + 0.2


def test_batch_equals_one_by_one_across_chunks(model: m.EmbeddingModel) -> None:
    texts = [s for s in REFERENCE["sentences"]][:10]
    single = np.vstack([model.embed([t]) for t in texts])
    saved = model.batch_size
    model.batch_size = 4  # three padded chunks of mixed lengths
    try:
        batched = model.embed(texts)
    finally:
        model.batch_size = saved
    assert batched.shape == (10, 384)
    assert np.min((batched * single).sum(axis=1)) > 0.9999


def test_text_past_256_tokens_is_truncated(model: m.EmbeddingModel) -> None:
    long_text = REFERENCE["sentences"][int(np.argmax(REFERENCE["token_counts"]))]
    extended = (long_text + " Extra words past the token limit change nothing.")[: m.MAX_TEXT_CHARS]
    a, b = model.embed([long_text, extended])
    assert float(a @ b) > 0.9999


def test_empty_sequence_gives_empty_array(model: m.EmbeddingModel) -> None:
    assert model.embed([]).shape == (0, 384)


def test_text_at_the_limit_is_accepted(model: m.EmbeddingModel) -> None:
    assert model.embed(["a" * m.MAX_TEXT_CHARS]).shape == (1, 384)


def test_thread_count_is_configurable_and_gives_the_same_answer(model: m.EmbeddingModel) -> None:
    two = m.EmbeddingModel.load(ARTIFACT, intra_op_threads=2)
    text = ["please refund the duplicate charge"]
    assert two.intra_op_threads == 2
    assert float(two.embed(text)[0] @ model.embed(text)[0]) > 0.9999


def test_forked_child_keeps_serving(model: m.EmbeddingModel) -> None:
    # GIVEN a loaded model that has already run (thread pools and arenas exist)
    parent = model.embed(["cancel my order"])[0]
    read_fd, write_fd = os.pipe()
    # WHEN a child process is forked from it (the emulator's SnapStart restore)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child process
        try:
            child = model.embed(["cancel my order"])[0]
            os.write(write_fd, f"{float(child @ parent):.6f}".encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], 30.0)
        answer = os.read(read_fd, 64).decode() if ready else ""
    finally:
        os.close(read_fd)
        if not answer:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    # THEN the child answers, with the same embedding
    assert answer and float(answer) > 0.9999


# --- bad input -----------------------------------------------------------------------------


def test_missing_model_dir_names_path_and_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(m.ModelNotFoundError) as info:
        m.EmbeddingModel.load(missing)
    assert str(missing) in str(info.value)
    assert "export_model.py" in str(info.value) and m.MODEL_DIR_ENV in str(info.value)
    assert isinstance(info.value, FileNotFoundError)


@pytest.mark.parametrize("absent", ["model.onnx", "tokenizer.json"])
def test_missing_model_file_is_named(tmp_path: Path, absent: str) -> None:
    for name in ("model.onnx", "tokenizer.json"):
        if name != absent:
            shutil.copyfile(ARTIFACT / name, tmp_path / name)
    with pytest.raises(m.ModelNotFoundError, match=absent):
        m.EmbeddingModel.load(tmp_path)


def test_corrupt_model_file_is_a_load_error(tmp_path: Path) -> None:
    shutil.copyfile(ARTIFACT / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "model.onnx").write_bytes(b"this is not an onnx model")
    with pytest.raises(m.ModelLoadError, match="model.onnx"):
        m.EmbeddingModel.load(tmp_path)


def test_corrupt_tokenizer_is_a_load_error(tmp_path: Path) -> None:
    shutil.copyfile(ARTIFACT / "model.onnx", tmp_path / "model.onnx")
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(m.ModelLoadError, match="tokenizer.json"):
        m.EmbeddingModel.load(tmp_path)


def test_unknown_provider_and_bad_thread_count_are_refused() -> None:
    with pytest.raises(ValueError, match="NoSuchExecutionProvider"):
        m.EmbeddingModel.load(ARTIFACT, providers=["NoSuchExecutionProvider"])
    with pytest.raises(ValueError, match="intra_op_threads"):
        m.EmbeddingModel.load(ARTIFACT, intra_op_threads=0)


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_empty_text_is_refused_everywhere(
    model: m.EmbeddingModel,
    classifier: m.IntentClassifier,
    intents: dict[str, list[str]],
    text: str,
) -> None:
    with pytest.raises(m.EmptyTextError):
        model.embed(["fine", text])
    with pytest.raises(ValueError, match="empty"):
        classifier.classify(text)
    with pytest.raises(ValueError, match="empty"):
        m.lexical_classify(text, intents)


def test_oversized_text_is_refused_everywhere(
    model: m.EmbeddingModel, classifier: m.IntentClassifier, intents: dict[str, list[str]]
) -> None:
    text = "x" * (m.MAX_TEXT_CHARS + 1)
    with pytest.raises(m.TextTooLongError, match=str(m.MAX_TEXT_CHARS)):
        model.embed([text])
    with pytest.raises(ValueError, match=str(m.MAX_TEXT_CHARS)):
        classifier.classify(text)
    with pytest.raises(ValueError, match=str(m.MAX_TEXT_CHARS)):
        m.lexical_classify(text, intents)
    # nothing is lost: the model keeps serving after refusing
    assert classifier.classify("where is my order").intent == "check_order_status"


def test_wrong_types_are_refused(model: m.EmbeddingModel) -> None:
    with pytest.raises(TypeError, match=r"\[text\]"):
        model.embed("a bare string")
    with pytest.raises(TypeError, match="str"):
        model.embed(["ok", 42])  # type: ignore[list-item]


# --- intents and classification ------------------------------------------------------------


def test_intents_file_has_6_to_10_intents_with_6_to_12_examples(
    intents: dict[str, list[str]],
) -> None:
    assert 6 <= len(intents) <= 10
    assert all(6 <= len(examples) <= 12 for examples in intents.values())
    assert set(HELD_OUT) == set(intents)


def test_held_out_phrases_are_not_examples(intents: dict[str, list[str]]) -> None:
    examples = {" ".join(p.lower().split()) for ps in intents.values() for p in ps}
    held_out = {" ".join(t.lower().split()) for ts in HELD_OUT.values() for t in ts}
    assert not examples & held_out


def test_classifier_accuracy_on_held_out_paraphrases(classifier: m.IntentClassifier) -> None:
    accuracy = _accuracy(classifier.classify)
    assert accuracy >= MODEL_ACCURACY_FLOOR


def test_classifier_result_shape(classifier: m.IntentClassifier) -> None:
    result = classifier.classify("I was charged twice for one order")
    assert result.degraded is False
    assert set(result.scores) == set(classifier.intents)
    assert result.score == result.scores[result.intent] == max(result.scores.values())
    assert list(result.scores.values()) == sorted(result.scores.values(), reverse=True)
    assert -1.0 <= min(result.scores.values()) and max(result.scores.values()) <= 1.0
    assert classifier.prototypes.shape == (len(classifier.intents), 384)


def test_lexical_fallback_is_degraded_and_beaten_by_the_model(
    classifier: m.IntentClassifier, intents: dict[str, list[str]]
) -> None:
    result = m.lexical_classify("where is my order, it has not arrived", intents)
    assert result.degraded is True
    assert result.intent == "check_order_status"
    assert 0.0 < result.score <= 1.0 and set(result.scores) == set(intents)
    lexical = _accuracy(lambda text: m.lexical_classify(text, intents))
    assert lexical >= LEXICAL_ACCURACY_FLOOR
    assert _accuracy(classifier.classify) > lexical


def test_lexical_fallback_says_unknown_without_shared_words(
    intents: dict[str, list[str]],
) -> None:
    result = m.lexical_classify("zyxwv qwerty", intents)
    assert result.intent == m.UNKNOWN_INTENT and result.score == 0.0 and result.degraded


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ("{not json", "not valid JSON"),
        ('{"greeting": ["hi"]}', '"intents" key'),
        ('{"intents": {}}', "non-empty"),
        ('{"intents": {"Bad Name": ["hi"]}}', "invalid"),
        ('{"intents": {"unknown": ["hi"]}}', "invalid"),
        ('{"intents": {"greeting": []}}', "non-empty list"),
        ('{"intents": {"greeting": "hi"}}', "non-empty list"),
        ('{"intents": {"greeting": ["  "]}}', "invalid example"),
        ('{"intents": {"a": ["Hi there"], "b": ["hi  there"]}}', "both"),
    ],
)
def test_bad_intents_file_is_refused(tmp_path: Path, content: str, match: str) -> None:
    path = tmp_path / "intents.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(m.IntentsFileError, match=match):
        m.load_intents(path)


def test_missing_intents_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="WARMSTART_INTENTS_FILE"):
        m.load_intents(tmp_path / "absent.json")


# --- configuration and import cost ---------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "opt_exists", "expected"),
    [
        ({"WARMSTART_MODEL_DIR": "/custom/model"}, True, Path("/custom/model")),
        ({"WARMSTART_MODEL_DIR": ""}, True, "opt"),
        ({}, True, "opt"),
        ({}, False, "repo"),
        (None, False, "repo"),
    ],
)
def test_default_model_dir(
    tmp_path: Path, env: Mapping[str, str] | None, opt_exists: bool, expected: object
) -> None:
    opt = tmp_path / "opt-model"
    if opt_exists:
        opt.mkdir()
    got = m.default_model_dir(env, lambda_model_dir=opt, repo_model_dir=ARTIFACT)
    assert got == {"opt": opt, "repo": ARTIFACT}.get(expected, expected)  # type: ignore[call-overload]


def test_import_loads_no_heavy_module() -> None:
    code = (
        "import sys, functions.intent_model.model; "
        "print(','.join(n for n in ('numpy', 'onnxruntime', 'tokenizers') if n in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=Path(m.__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == ""
