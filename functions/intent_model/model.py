"""Sentence embeddings (all-MiniLM-L6-v2, ONNX int8), the intent classifier and its lexical
fallback: the model code the reference agent and the GPU overflow endpoint share.

Importing this module loads only the standard library: ``numpy``, ``onnxruntime`` and
``tokenizers`` are imported inside :meth:`EmbeddingModel.load` (and the functions that need
them), so a handler can import it during an on-demand init phase for free and pay for the
model only where it decides to load it.

The model
---------
``model_dir`` (see :func:`default_model_dir`) holds the files that
``layers/model/export_model.py`` writes and the CDK model layer ships to ``/opt/model``:

- ``model.onnx``: the BERT encoder of sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0),
  int8 weights; inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64,
  shape (batch, tokens)); output ``last_hidden_state`` (float32, (batch, tokens, 384)).
- ``tokenizer.json``: the Hugging Face fast tokenizer (WordPiece, lower case).

A sentence embedding is the mean of the token embeddings over the attention mask, L2
normalised, from at most 256 tokens (longer input is truncated): what sentence-transformers
does for this model.

Intents file format
-------------------
A JSON object (UTF-8)::

    {
      "format": "warmstart-intents/1",          # optional, informative
      "description": "...",                     # optional, informative
      "intents": {
        "check_order_status": ["where is my order", "has my package shipped yet", ...],
        "greeting": ["hello", "hi there", ...]
      }
    }

``intents`` maps an intent name (lower case ``[a-z][a-z0-9_]*``, at most 64 characters, not
``"unknown"``) to a list of at least one example phrase (non-empty strings of at most
:data:`MAX_TEXT_CHARS` characters). One phrase may not appear under two intents (compared
case- and whitespace-insensitively). :class:`IntentClassifier` represents each intent by the
normalised mean of its examples' embeddings (its prototype) and answers the intent whose
prototype has the highest cosine similarity with the text. :func:`lexical_classify` (the L2
degradation fallback, no model) scores TF-IDF word overlap with the same examples.

References
----------
- Model card: https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2
- Reimers & Gurevych (2019), Sentence-BERT, https://arxiv.org/abs/1908.10084 (mean pooling)
- Snell et al. (2017), Prototypical Networks, https://arxiv.org/abs/1703.05175 (class
  prototype = mean embedding)
- onnxruntime threading: https://onnxruntime.ai/docs/performance/tune-performance/threading.html
"""

from __future__ import annotations

import json
import math
import re
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only, never imported at run time
    import numpy as np

__all__ = [
    "DEFAULT_INTENTS_FILE",
    "EMBEDDING_DIM",
    "LAMBDA_MODEL_DIR",
    "MAX_SEQ_TOKENS",
    "MAX_TEXT_CHARS",
    "MAX_TOOL_MS",
    "MODEL_DIR_ENV",
    "MODEL_FILE",
    "MODEL_ID",
    "REPO_MODEL_DIR",
    "TOKENIZER_FILE",
    "UNKNOWN_INTENT",
    "EmbeddingModel",
    "EmptyTextError",
    "IntentClassifier",
    "IntentResult",
    "IntentsFileError",
    "ModelLoadError",
    "ModelNotFoundError",
    "TextTooLongError",
    "check_text",
    "default_model_dir",
    "lexical_classify",
    "load_intents",
    "validate_intents",
]

# One contract for the request (functions/intent_model/answers.py): the limits live there.
from functions.intent_model.answers import MAX_TEXT_CHARS, MAX_TOOL_MS

MAX_SEQ_TOKENS = 256
"""Token limit of all-MiniLM-L6-v2 as sentence-transformers configures it (max_seq_length)."""
EMBEDDING_DIM = 384
MODEL_ID = "all-MiniLM-L6-v2-int8"
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MODEL_DIR_ENV = "WARMSTART_MODEL_DIR"
LAMBDA_MODEL_DIR = Path("/opt/model")
"""Where the model layer lands in Lambda (layers are extracted to /opt)."""
REPO_MODEL_DIR = Path(__file__).resolve().parents[2] / "layers" / "model" / "artifact"
DEFAULT_INTENTS_FILE = Path(__file__).resolve().with_name("intents.json")
UNKNOWN_INTENT = "unknown"
"""Answered by :func:`lexical_classify` when the text shares no word with any example."""
DEFAULT_BATCH_SIZE = 32
"""Most texts per ONNX run inside :meth:`EmbeddingModel.embed`."""
DEFAULT_BATCH_TOKENS = 2048
"""Most padded tokens (texts x longest text) per ONNX run: bounds memory and keeps one long
text from padding a whole batch of short ones to 256 tokens."""

_INTENT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_EXPORT_HINT = (
    "build it with `python layers/model/export_model.py` (see layers/model/README.md) or set "
    f"{MODEL_DIR_ENV} to a folder holding {MODEL_FILE} and {TOKENIZER_FILE}"
)


class ModelNotFoundError(FileNotFoundError):
    """The model folder or one of its files is missing."""


class ModelLoadError(RuntimeError):
    """The model files exist but onnxruntime or tokenizers could not load them."""


class EmptyTextError(ValueError):
    """The text is empty or whitespace only."""


class TextTooLongError(ValueError):
    """The text is longer than :data:`MAX_TEXT_CHARS` characters."""


class IntentsFileError(ValueError):
    """The intents file (or mapping) does not follow the documented format."""


def default_model_dir(
    env: Mapping[str, str] | None = None,
    *,
    lambda_model_dir: Path = LAMBDA_MODEL_DIR,
    repo_model_dir: Path = REPO_MODEL_DIR,
) -> Path:
    """Return the folder to load the model from.

    Parameters
    ----------
    env : Mapping[str, str] or None
        Environment variables (pass ``os.environ`` or the run-time config's copy). ``None``
        means "no variables": this function never reads ``os.environ`` itself.
    lambda_model_dir : Path
        The model layer's folder in Lambda, ``/opt/model``.
    repo_model_dir : Path
        The artifact folder in this repository, ``layers/model/artifact``.

    Returns
    -------
    Path
        ``env["WARMSTART_MODEL_DIR"]`` when set and non-empty; else ``lambda_model_dir`` if it
        exists; else ``repo_model_dir``. The folder is not checked here; :meth:`EmbeddingModel.load`
        raises :class:`ModelNotFoundError` for a missing one.
    """
    configured = (env or {}).get(MODEL_DIR_ENV, "").strip()
    if configured:
        return Path(configured)
    if lambda_model_dir.is_dir():
        return lambda_model_dir
    return repo_model_dir


def check_text(text: object) -> str:
    """Validate one input text and return it unchanged.

    Parameters
    ----------
    text : object
        The text to embed or classify.

    Returns
    -------
    str
        ``text``.

    Raises
    ------
    TypeError
        ``text`` is not a ``str``.
    EmptyTextError
        ``text`` is empty or whitespace only (a ``ValueError``).
    TextTooLongError
        ``text`` has more than :data:`MAX_TEXT_CHARS` characters (a ``ValueError``).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise EmptyTextError("text is empty; send at least one non-blank character")
    if len(text) > MAX_TEXT_CHARS:
        raise TextTooLongError(
            f"text has {len(text)} characters, more than the limit of {MAX_TEXT_CHARS}; "
            "shorten it or split it into several requests"
        )
    return text


class EmbeddingModel:
    """all-MiniLM-L6-v2 sentence embeddings with onnxruntime and tokenizers.

    Create it with :meth:`load`. :meth:`embed` is safe to call from several threads
    (``InferenceSession.run`` and ``Tokenizer.encode`` are thread-safe) and in a child
    process forked after the load (as a SnapStart restore is emulated locally).

    Attributes
    ----------
    model_dir : Path
        Folder the model was loaded from.
    load_ms : float
        Measured wall time of tokenizer load + ONNX session creation, in ms.
    import_ms : float
        Measured wall time of the lazy imports (numpy, onnxruntime, tokenizers) done by
        :meth:`load`, in ms; about 0 when they were already imported.
    intra_op_threads : int
        onnxruntime intra-op threads.
    providers : tuple[str, ...]
        Execution providers of the session, in priority order.
    dim : int
        Embedding size, 384.
    """

    def __init__(
        self,
        *,
        session: Any,
        tokenizer: Any,
        model_dir: Path,
        load_ms: float,
        import_ms: float,
        intra_op_threads: int,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ) -> None:
        self._session = session
        self._tokenizer = tokenizer
        self._pad_id = int(tokenizer.token_to_id("[PAD]"))
        self._input_names = frozenset(i.name for i in session.get_inputs())
        self._output_name = session.get_outputs()[0].name
        self.model_dir = model_dir
        self.load_ms = load_ms
        self.import_ms = import_ms
        self.intra_op_threads = intra_op_threads
        self.providers: tuple[str, ...] = tuple(session.get_providers())
        self.batch_size = batch_size
        self.batch_tokens = batch_tokens
        self.dim = EMBEDDING_DIM

    @classmethod
    def load(
        cls,
        model_dir: Path,
        *,
        intra_op_threads: int = 1,
        providers: Sequence[str] | None = None,
    ) -> EmbeddingModel:
        """Load the tokenizer and create the ONNX Runtime session.

        Parameters
        ----------
        model_dir : Path
            Folder holding ``model.onnx`` and ``tokenizer.json``.
        intra_op_threads : int
            Threads onnxruntime uses inside one operator. Default 1: a Lambda execution
            environment gets one vCPU per 1,769 MB of memory, so more threads only contend
            below that. Inter-op threads are always 1 (sequential execution), and idle
            threads do not spin.
        providers : Sequence[str] or None
            onnxruntime execution providers in priority order, e.g.
            ``["CUDAExecutionProvider", "CPUExecutionProvider"]``. ``None`` means CPU only.

        Returns
        -------
        EmbeddingModel

        Raises
        ------
        ModelNotFoundError
            ``model_dir`` or one of its two files does not exist.
        ModelLoadError
            A file exists but cannot be loaded (corrupt or not the expected model).
        ValueError
            ``intra_op_threads`` < 1, or a provider this onnxruntime build lacks.

        References
        ----------
        Lambda memory and vCPU: https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html
        """
        model_dir = Path(model_dir)
        if intra_op_threads < 1:
            raise ValueError(f"intra_op_threads must be >= 1, got {intra_op_threads}")
        if not model_dir.is_dir():
            raise ModelNotFoundError(f"model folder {model_dir} does not exist; {_EXPORT_HINT}")
        for name in (MODEL_FILE, TOKENIZER_FILE):
            if not (model_dir / name).is_file():
                raise ModelNotFoundError(f"model folder {model_dir} has no {name}; {_EXPORT_HINT}")

        started = time.perf_counter()
        import numpy  # noqa: F401  (imported here so import_ms covers it)
        import onnxruntime as ort
        import tokenizers

        import_ms = (time.perf_counter() - started) * 1e3

        available = ort.get_available_providers()
        chosen = list(providers) if providers is not None else ["CPUExecutionProvider"]
        missing = [p for p in chosen if p not in available]
        if not chosen or missing:
            raise ValueError(
                f"execution providers {missing or chosen} are not available in this "
                f"onnxruntime build; available: {available}"
            )

        started = time.perf_counter()
        try:
            tokenizer = tokenizers.Tokenizer.from_file(str(model_dir / TOKENIZER_FILE))
        except Exception as exc:  # tokenizers raises a bare Exception on bad JSON
            raise ModelLoadError(
                f"cannot load {model_dir / TOKENIZER_FILE}: {exc}; {_EXPORT_HINT}"
            ) from exc
        pad_id = tokenizer.token_to_id("[PAD]")
        if pad_id is None:
            raise ModelLoadError(
                f"{model_dir / TOKENIZER_FILE} has no [PAD] token: not the all-MiniLM-L6-v2 "
                f"tokenizer; {_EXPORT_HINT}"
            )
        tokenizer.enable_truncation(max_length=MAX_SEQ_TOKENS)
        tokenizer.no_padding()  # embed() pads each ONNX batch to its own longest text

        if hasattr(ort, "disable_telemetry_events"):
            ort.disable_telemetry_events()
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.log_severity_level = 3  # errors only: no warnings in the function's logs
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            session = ort.InferenceSession(
                str(model_dir / MODEL_FILE), sess_options=options, providers=chosen
            )
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidProtobuf types
            raise ModelLoadError(
                f"onnxruntime cannot load {model_dir / MODEL_FILE}: {exc}; {_EXPORT_HINT}"
            ) from exc
        load_ms = (time.perf_counter() - started) * 1e3

        inputs = {i.name for i in session.get_inputs()}
        output_shape = session.get_outputs()[0].shape
        if not {"input_ids", "attention_mask"} <= inputs or output_shape[-1] != EMBEDDING_DIM:
            raise ModelLoadError(
                f"{model_dir / MODEL_FILE} has inputs {sorted(inputs)} and output shape "
                f"{output_shape}; expected input_ids + attention_mask -> (batch, tokens, "
                f"{EMBEDDING_DIM}); {_EXPORT_HINT}"
            )
        return cls(
            session=session,
            tokenizer=tokenizer,
            model_dir=model_dir,
            load_ms=load_ms,
            import_ms=import_ms,
            intra_op_threads=intra_op_threads,
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts.

        Parameters
        ----------
        texts : Sequence[str]
            Texts, each non-blank and at most :data:`MAX_TEXT_CHARS` characters; each is
            truncated to 256 tokens. Texts of similar token length are run together, at most
            ``batch_size`` (32) texts and ``batch_tokens`` (2,048) padded tokens per ONNX
            run, each run padded to its longest text; the rows of the result follow ``texts``.

        Returns
        -------
        numpy.ndarray
            Shape (len(texts), 384), float32, each row L2-normalised (unit length).
            An empty ``texts`` gives shape (0, 384).

        Raises
        ------
        TypeError
            ``texts`` is a single ``str`` (pass ``[text]``) or holds a non-``str``.
        EmptyTextError, TextTooLongError
            A text is blank or too long (both ``ValueError``); nothing is computed.
        """
        import numpy as np

        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts; wrap a single text: [text]")
        items = [check_text(t) for t in texts]
        out = np.empty((len(items), EMBEDDING_DIM), dtype=np.float32)
        if not items:
            return out
        # One text at a time: encode_batch starts the tokenizers' Rust thread pool, which
        # tokenizers disables (with a warning) in a process forked after using it, as the
        # local emulator's SnapStart restore does; on Lambda's single vCPU it buys nothing.
        encodings = [self._tokenizer.encode(text) for text in items]
        order = sorted(range(len(items)), key=lambda i: len(encodings[i].ids))
        chunk: list[int] = []
        for index in order:
            longest = len(encodings[index].ids)  # ascending: the newcomer is the longest
            if chunk and (
                len(chunk) >= self.batch_size or (len(chunk) + 1) * longest > self.batch_tokens
            ):
                out[chunk] = self._run([encodings[i] for i in chunk])
                chunk = []
            chunk.append(index)
        out[chunk] = self._run([encodings[i] for i in chunk])
        return out

    def _run(self, encodings: list[Any]) -> np.ndarray:
        """One ONNX run over encodings padded to the longest; returns (n, 384) unit rows."""
        import numpy as np

        width = max(len(e.ids) for e in encodings)
        ids = np.full((len(encodings), width), self._pad_id, dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        types = np.zeros((len(encodings), width), dtype=np.int64)
        for row, encoding in enumerate(encodings):
            length = len(encoding.ids)
            ids[row, :length] = encoding.ids
            mask[row, :length] = encoding.attention_mask
            types[row, :length] = encoding.type_ids
        feed = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feed["token_type_ids"] = types
        (hidden,) = self._session.run([self._output_name], feed)
        return _mean_pool_normalise(hidden, mask)


def _mean_pool_normalise(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of token embeddings over the attention mask, then L2 normalisation.

    Parameters
    ----------
    hidden : numpy.ndarray
        (batch, tokens, dim) float32 token embeddings.
    mask : numpy.ndarray
        (batch, tokens) 0/1 attention mask.

    Returns
    -------
    numpy.ndarray
        (batch, dim) float32, unit rows.

    References
    ----------
    sentence-transformers ``Pooling(mean)`` + ``Normalize`` (eps 1e-9 on the token count,
    1e-12 on the norm): https://sbert.net/docs/package_reference/sentence_transformer/models.html
    """
    import numpy as np

    weights = mask[:, :, None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    pooled = summed / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    unit: np.ndarray = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
    return unit


@dataclass(frozen=True)
class IntentResult:
    """The answer of an intent classifier.

    Attributes
    ----------
    intent : str
        Best intent, or :data:`UNKNOWN_INTENT` (lexical fallback, no shared word).
    score : float
        Its score: cosine similarity in [-1, 1] (model) or TF-IDF cosine in [0, 1] (lexical).
    scores : dict[str, float]
        Score of every intent, highest first.
    degraded : bool
        True for the model-free L2 fallback (:func:`lexical_classify`).
    """

    intent: str
    score: float
    scores: dict[str, float] = field(default_factory=dict)
    degraded: bool = False


def load_intents(path: Path | None = None) -> dict[str, list[str]]:
    """Read and validate an intents file (format in the module docstring).

    Parameters
    ----------
    path : Path or None
        The JSON file; ``None`` means :data:`DEFAULT_INTENTS_FILE`
        (``functions/intent_model/intents.json``).

    Returns
    -------
    dict[str, list[str]]
        Intent name -> example phrases, in file order.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    IntentsFileError
        Not JSON, or not the documented format (a ``ValueError``; the message says where).
    """
    path = DEFAULT_INTENTS_FILE if path is None else Path(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(
            f"intents file {path} does not exist; set WARMSTART_INTENTS_FILE to a JSON file "
            "in the format described in functions/agent/model.py"
        ) from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise IntentsFileError(f"intents file {path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or "intents" not in data:
        raise IntentsFileError(
            f'intents file {path} must be a JSON object with an "intents" key mapping intent '
            "names to lists of example phrases"
        )
    return validate_intents(data["intents"], source=str(path))


def validate_intents(intents: object, *, source: str = "intents") -> dict[str, list[str]]:
    """Check an intent -> examples mapping; return a plain-dict copy.

    Raises
    ------
    IntentsFileError
        The mapping is empty, a name is invalid, an example list is empty, an example is not
        a non-blank string of at most :data:`MAX_TEXT_CHARS` characters, or one phrase is
        listed under two intents.
    """
    if not isinstance(intents, Mapping) or not intents:
        raise IntentsFileError(f"{source}: intents must be a non-empty object of name -> list")
    result: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    for name, examples in intents.items():
        if not isinstance(name, str) or not _INTENT_NAME.match(name) or name == UNKNOWN_INTENT:
            raise IntentsFileError(
                f"{source}: intent name {name!r} is invalid; use lower case letters, digits "
                f"and _ (at most 64, starting with a letter), and not {UNKNOWN_INTENT!r}"
            )
        if isinstance(examples, str) or not isinstance(examples, Sequence) or not examples:
            raise IntentsFileError(
                f"{source}: intent {name!r} needs a non-empty list of example phrases"
            )
        for example in examples:
            if not isinstance(example, str) or not example.strip() or len(example) > MAX_TEXT_CHARS:
                raise IntentsFileError(
                    f"{source}: intent {name!r} has an invalid example {example!r}; examples "
                    f"are non-blank strings of at most {MAX_TEXT_CHARS} characters"
                )
            key = " ".join(example.lower().split())
            if key in seen and seen[key] != name:
                raise IntentsFileError(
                    f"{source}: example {example!r} is listed under both {seen[key]!r} and "
                    f"{name!r}; keep it under one intent"
                )
            seen[key] = name
        result[name] = list(examples)
    return result


class IntentClassifier:
    """Nearest-prototype intent classifier over sentence embeddings.

    Each intent's prototype is the L2-normalised mean of its examples' embeddings; a text
    gets the intent whose prototype has the highest cosine similarity with its embedding.

    Parameters
    ----------
    model : EmbeddingModel
        The loaded embedding model.
    intents : Mapping[str, Sequence[str]]
        Intent name -> example phrases (see :func:`load_intents`). The examples are embedded
        once, here.

    Raises
    ------
    IntentsFileError
        ``intents`` does not follow the format.

    References
    ----------
    Snell et al. (2017), Prototypical Networks for Few-shot Learning,
    https://arxiv.org/abs/1703.05175
    """

    def __init__(self, model: EmbeddingModel, intents: Mapping[str, Sequence[str]]) -> None:
        import numpy as np

        checked = validate_intents(intents)
        self.model = model
        self.intents: tuple[str, ...] = tuple(checked)
        started = time.perf_counter()
        phrases = [p for examples in checked.values() for p in examples]
        embedded = model.embed(phrases)
        prototypes = np.empty((len(checked), model.dim), dtype=np.float32)
        offset = 0
        for row, examples in enumerate(checked.values()):
            mean = embedded[offset : offset + len(examples)].mean(axis=0)
            prototypes[row] = mean / max(float(np.linalg.norm(mean)), 1e-12)
            offset += len(examples)
        self.prototypes = prototypes
        """(n_intents, 384) float32 unit rows, in the order of :attr:`intents`."""
        self.build_ms = (time.perf_counter() - started) * 1e3
        """Measured time to embed the examples, in ms."""

    def classify(self, text: str) -> IntentResult:
        """Classify one text.

        Parameters
        ----------
        text : str
            Non-blank, at most :data:`MAX_TEXT_CHARS` characters.

        Returns
        -------
        IntentResult
            ``degraded=False``; ``score`` and ``scores`` are cosine similarities.

        Raises
        ------
        TypeError, EmptyTextError, TextTooLongError
            As :func:`check_text`.
        """
        embedding = self.model.embed([check_text(text)])[0]
        similarities = self.prototypes @ embedding
        scores = {name: float(s) for name, s in zip(self.intents, similarities)}
        return _result(scores, degraded=False)


def _result(scores: dict[str, float], *, degraded: bool) -> IntentResult:
    ranked = dict(sorted(scores.items(), key=lambda item: item[1], reverse=True))
    best, best_score = next(iter(ranked.items()))
    if best_score <= 0.0 and degraded:
        best = UNKNOWN_INTENT
    return IntentResult(intent=best, score=best_score, scores=ranked, degraded=degraded)


# --- lexical fallback (L2 degradation): no model, stdlib only -------------------------------

_WORD = re.compile(r"[^\W_]+")
# fmt: off
_STOP_WORDS = frozenset((
    "a", "an", "the", "i", "me", "my", "we", "our", "you", "your", "it", "its", "is",
    "are", "was", "were", "be", "been", "am", "do", "does", "did", "to", "of", "in", "on",
    "at", "for", "with", "and", "or", "so", "this", "that", "these", "those", "there",
    "here", "please", "can", "could", "would", "will", "just", "what", "how", "when",
    "why", "where", "which", "who",
))
# fmt: on
"""Words that say little about the intent; a text made only of them keeps them."""
_VOWELS = frozenset("aeiouy")


def _stem(word: str) -> str:
    """Map a word to a crude stem so that forms of one word share a key.

    ``orders``/``ordered``/``ordering`` -> ``order``; ``charge``/``charged``/``charges`` ->
    ``charg``; ``shipped``/``shipping`` -> ``ship``; ``deliveries`` -> ``delivery``. A tiny
    rule set in the spirit of Porter's step 1 (plurals, -ed, -ing), enough for matching a
    query word against an example word of the same family.

    References
    ----------
    Porter (1980), An algorithm for suffix stripping, Program 14(3): 130-137.
    """
    if len(word) <= 3:
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    for suffix in ("ing", "ed"):
        stem = word[: -len(suffix)]
        if word.endswith(suffix) and len(stem) >= 3 and _VOWELS & set(stem[:-1]):
            word = stem
            if len(word) > 3 and word[-1] == word[-2] and word[-1] not in "lsz":
                word = word[:-1]  # shipp -> ship
            break
    if len(word) > 3 and word.endswith("e"):
        word = word[:-1]
    return word


def _terms(text: str) -> list[str]:
    words = _WORD.findall(text.lower())
    kept = [w for w in words if w not in _STOP_WORDS]
    return [_stem(w) for w in (kept or words)]


def lexical_classify(text: str, intents: Mapping[str, Sequence[str]]) -> IntentResult:
    """Classify by word overlap with the example phrases: the model-free L2 fallback.

    The lexical twin of :class:`IntentClassifier`: each intent is one document made of all
    its example phrases (its lexical prototype). Terms are lower-cased words without stop
    words, crudely stemmed; weights are sublinear TF (1 + ln tf) times smoothed IDF over the
    intents, ln((1 + n) / (1 + df)) + 1; the score is the cosine similarity between the
    text's vector and the intent's vector.

    Parameters
    ----------
    text : str
        Non-blank, at most :data:`MAX_TEXT_CHARS` characters.
    intents : Mapping[str, Sequence[str]]
        Intent name -> example phrases (see :func:`load_intents`).

    Returns
    -------
    IntentResult
        ``degraded=True``; scores in [0, 1]. When the text shares no term with any example
        the intent is :data:`UNKNOWN_INTENT` with score 0.

    Raises
    ------
    TypeError, EmptyTextError, TextTooLongError
        As :func:`check_text`.
    IntentsFileError
        ``intents`` does not follow the format.

    References
    ----------
    Manning, Raghavan & Schuetze (2008), Introduction to Information Retrieval, sections
    6.2-6.4 (tf-idf, sublinear tf scaling, cosine similarity), https://nlp.stanford.edu/IR-book/
    """
    check_text(text)
    checked = validate_intents(intents)
    documents = {
        name: Counter(term for phrase in examples for term in _terms(phrase))
        for name, examples in checked.items()
    }
    n_docs = len(documents)
    doc_freq: Counter[str] = Counter()
    for counts in documents.values():
        doc_freq.update(counts.keys())

    def unit_vector(counts: Counter[str]) -> dict[str, float]:
        vector = {
            term: (1.0 + math.log(tf)) * (math.log((1 + n_docs) / (1 + doc_freq[term])) + 1.0)
            for term, tf in counts.items()
        }
        norm = math.sqrt(sum(v * v for v in vector.values())) or 1.0
        return {term: v / norm for term, v in vector.items()}

    query = unit_vector(Counter(_terms(text)))
    scores: dict[str, float] = {}
    for name, counts in documents.items():
        document = unit_vector(counts)
        scores[name] = sum(w * document.get(term, 0.0) for term, w in query.items())
    return _result(scores, degraded=True)
