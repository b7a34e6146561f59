"""Every ``WARMSTART_*`` environment variable name, spelled once (``ENV_*``), and what each
carries (:data:`ENVIRONMENT`). The deploy side sets them (the CDK constructs, the local stack,
the replay, the commands), the run side reads them (`functions.runtime.config`,
``warmers.config``, the GPU endpoint's server, the local bootstrap). Code names a variable by
its constant here, never by a string literal (``tests/unit/test_contract.py`` checks).

On the agents' init path: no import.
"""

from __future__ import annotations

# The agent function's, set by the deploy (infra/constructs/agent_function.py, the local stack)
# and read once by `functions.runtime.config.RuntimeConfig.from_env`.
ENV_AGENT_NAME = "WARMSTART_AGENT_NAME"
ENV_BASE_PATH = "WARMSTART_BASE_PATH"
ENV_STRIP_PREFIXES = "WARMSTART_STRIP_PREFIXES"
ENV_SLA_MS = "WARMSTART_SLA_MS"
ENV_DEBUG_RESOURCE = "WARMSTART_DEBUG_RESOURCE"
ENV_DEGRADATION_PARAMETER = "WARMSTART_DEGRADATION_PARAMETER"
ENV_DEGRADATION_LEVEL = "WARMSTART_DEGRADATION_LEVEL"
ENV_OVERFLOW_ENDPOINT_NAME = "WARMSTART_OVERFLOW_ENDPOINT_NAME"
ENV_OVERFLOW_ENDPOINT_URL = "WARMSTART_OVERFLOW_ENDPOINT_URL"
ENV_OVERFLOW_INFERENCE_COMPONENT = "WARMSTART_OVERFLOW_INFERENCE_COMPONENT"
ENV_OVERFLOW_CAPACITY_PARAMETER = "WARMSTART_OVERFLOW_CAPACITY_PARAMETER"
ENV_ADMISSION = "WARMSTART_ADMISSION"
ENV_FINISH_PRELOAD = "WARMSTART_FINISH_PRELOAD"
ENV_CALIBRATION = "WARMSTART_CALIBRATION"
ENV_STREAM_IDLE_MS = "WARMSTART_STREAM_IDLE_MS"
# The model's, set by the deploy on the agent and the GPU endpoint (the model layer's mount).
ENV_MODEL_DIR = "WARMSTART_MODEL_DIR"
ENV_INTENTS_FILE = "WARMSTART_INTENTS_FILE"
# The GPU endpoint's server (functions/gpu_endpoint), set by the local stack and the benches.
ENV_GPU_PROVIDERS = "WARMSTART_GPU_PROVIDERS"
ENV_GPU_FAULTS = "WARMSTART_GPU_FAULTS"
ENV_GPU_ENDPOINT_URL = "WARMSTART_GPU_ENDPOINT_URL"
# The warmer's, set by infra/constructs/warmer.py or the local stack, read by warmers/config.py.
ENV_WARMER_CONFIG = "WARMSTART_WARMER_CONFIG"
ENV_WARMER_STATE_PREFIX = "WARMSTART_WARMER_STATE_PREFIX"
ENV_WARMER_DRY_RUN = "WARMSTART_WARMER_DRY_RUN"
ENV_AWS_ENDPOINT_URL = "WARMSTART_AWS_ENDPOINT_URL"
ENV_LAMBDA_ENDPOINT_URL = "WARMSTART_LAMBDA_ENDPOINT_URL"
# The tools' (infra/cli.py, infra/commands, infra/local, bench/).
ENV_DEBUG = "WARMSTART_DEBUG"
ENV_OUT_DIR = "WARMSTART_OUT_DIR"
ENV_CALIBRATION_SAMPLE = "WARMSTART_CALIBRATION_SAMPLE"
ENV_LOCAL_MODE = "_WARMSTART_ENV_MODE"
ENV_LOCAL_FD = "_WARMSTART_ENV_FD"
ENV_LOCAL_RUNTIME_PYTHON = "_WARMSTART_RUNTIME_PYTHON"
ENV_LOCUST_AGENTS = "WARMSTART_LOCUST_AGENTS"
ENV_LOCUST_LOOKUP_PREFIX = "WARMSTART_LOCUST_LOOKUP_PREFIX"
ENV_LOCUST_MIN_WAIT_S = "WARMSTART_LOCUST_MIN_WAIT_S"
ENV_LOCUST_MAX_WAIT_S = "WARMSTART_LOCUST_MAX_WAIT_S"

#: Every name above -> what it carries (who sets it, who reads it).
ENVIRONMENT: dict[str, str] = {
    ENV_AGENT_NAME: "the agent a function serves (deploy -> runtime config)",
    ENV_BASE_PATH: "the agent's external path prefix, e.g. /lookup (deploy -> runtime config)",
    ENV_STRIP_PREFIXES: "custom-domain mapping keys to strip, comma-separated (runtime config)",
    ENV_SLA_MS: "default SLA of the P0 routes, ms (deploy -> runtime config)",
    ENV_DEBUG_RESOURCE: "true: serve GET /debug/resource (deploy -> runtime config)",
    ENV_DEGRADATION_PARAMETER: "SSM parameter of the degradation level (deploy -> runtime)",
    ENV_DEGRADATION_LEVEL: "static degradation level without a parameter (runtime config)",
    ENV_OVERFLOW_ENDPOINT_NAME: "SageMaker endpoint overflow goes to (deploy -> runtime)",
    ENV_OVERFLOW_ENDPOINT_URL: "endpoint URL of the sagemaker-runtime client (local stack)",
    ENV_OVERFLOW_INFERENCE_COMPONENT: "InferenceComponentName of the overflow (deploy)",
    ENV_OVERFLOW_CAPACITY_PARAMETER: "SSM parameter of the endpoint's capacity (deploy)",
    ENV_ADMISSION: "on | off: admission, or the plain on-demand baseline (runtime config)",
    ENV_FINISH_PRELOAD: "after | before | off: where a cold preload finishes (runtime config)",
    ENV_CALIBRATION: "the admission calibration document, JSON (synth -> toolkit)",
    ENV_STREAM_IDLE_MS: "longest silence of a streaming route, ms (runtime config)",
    ENV_MODEL_DIR: "folder of model.onnx, the model layer's /opt/model (deploy -> model)",
    ENV_INTENTS_FILE: "the intents file of the reference model (model)",
    ENV_GPU_PROVIDERS: "ONNX Runtime providers of the GPU endpoint server, comma-separated",
    ENV_GPU_FAULTS: "true: the GPU endpoint server serves its fault API (local stack)",
    ENV_GPU_ENDPOINT_URL: "first stdout line of the GPU endpoint server: NAME=URL",
    ENV_WARMER_CONFIG: "the warmer's document, JSON: WarmerDocument (deploy -> warmer)",
    ENV_WARMER_STATE_PREFIX: "SSM path of the warmer's last good plans (deploy -> warmer)",
    ENV_WARMER_DRY_RUN: "true: the warmer plans and applies nothing (warmer)",
    ENV_AWS_ENDPOINT_URL: "endpoint of every warmer client, e.g. moto (local stack -> warmer)",
    ENV_LAMBDA_ENDPOINT_URL: "endpoint of the warmer's Lambda client (local stack -> warmer)",
    ENV_DEBUG: "1: the CLI prints tracebacks (infra/app.py)",
    ENV_OUT_DIR: "where the commands write their output (infra/commands)",
    ENV_CALIBRATION_SAMPLE: "stdout prefix of one calibrate-admission sample (infra/commands)",
    ENV_LOCAL_MODE: "serve | zygote: the local execution environment's mode (emulator)",
    ENV_LOCAL_FD: "the zygote's control socket (emulator -> bootstrap)",
    ENV_LOCAL_RUNTIME_PYTHON: "the function's CPython in local runs (function_runtime)",
    ENV_LOCUST_AGENTS: "agents the locust load drives, comma-separated (bench/locustfile.py)",
    ENV_LOCUST_LOOKUP_PREFIX: "path prefix of the lookup agent (bench/locustfile.py)",
    ENV_LOCUST_MIN_WAIT_S: "least wait between a locust user's requests, s",
    ENV_LOCUST_MAX_WAIT_S: "most wait between a locust user's requests, s",
}


