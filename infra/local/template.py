"""Read the functions the local stack runs from a synthesized CloudFormation template.

Works on any template with ``AWS::Lambda::Function``, ``AWS::Lambda::Version``,
``AWS::Lambda::Alias`` (``ProvisionedConcurrencyConfig``), ``AWS::Lambda::LayerVersion``,
``AWS::ApiGatewayV2::Integration``, ``AWS::ApiGatewayV2::Route`` and ``AWS::ApiGatewayV2::Stage``
resources, CDK's or hand-written: every function and alias, the HTTP API's routes (``RouteKey``
-> ``Target`` integration -> ``IntegrationUri`` alias), so the local gateway serves every agent at
its path prefix, and what the gateway enforces (:class:`~infra.local.spec.StageSettings`: the
stage's throttling, the integrations' timeouts). The agents themselves are the functions whose environment names one
(``WARMSTART_AGENT_NAME``, see :attr:`~infra.local.spec.LocalApp.agents`). Code locations come from
CDK's asset metadata (``aws:asset:path``, relative to the template) or an inline ``ZipFile``.

Intrinsic functions are resolved where the value is knowable locally (``Ref`` to parameters
with defaults, pseudo parameters and resources; ``Fn::GetAtt`` ``Arn``; ``Fn::Join``;
``Fn::Sub``; ``Fn::Select``; ``Fn::Split``). Environment variables that cannot be resolved are
left out, each with a warning in :attr:`LocalApp.warnings`.

References
----------
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-lambda-function.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-lambda-alias.html
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/intrinsic-function-reference.html
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from infra.local.emulator.config import ManagedInstancesConfig
from infra.local.spec import (
    ACCOUNT_BURST,
    ACCOUNT_RATE_PER_S,
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_S,
    AliasSpec,
    FunctionSpec,
    GatewayRoute,
    LocalApp,
    RouteThrottle,
    SpecError,
    StageSettings,
)

LOCAL_ACCOUNT_ID = "123456789012"
#: vCPUs by EC2 size name, the same in every current general-purpose, compute- and memory-
#: optimized family (m, c, r; the LMI instance types): ``medium`` 1, ``large`` 2, ``xlarge``
#: 4, ``Nxlarge`` 4N. https://docs.aws.amazon.com/ec2/latest/instancetypes/gp.html
_EC2_SIZE = re.compile(r"^[a-z][a-z0-9-]*\.(medium|large|(\d*)xlarge)$")


def instance_vcpus(instance_type: str) -> int | None:
    """vCPUs of an EC2 instance type by its size name (``m7g.large`` -> 2, ``c7i.4xlarge`` ->
    16); None for a name of another form (``metal``, ...)."""
    match = _EC2_SIZE.match(instance_type)
    if match is None:
        return None
    size, times = match.group(1), match.group(2)
    if size == "medium":
        return 1
    if size == "large":
        return 2
    return 4 * int(times or 1)
_ARN_FUNCTION = re.compile(r"function:([A-Za-z0-9_-]+)(?::([A-Za-z0-9_$-]+))?")


class TemplateError(ValueError):
    """The template cannot be read or describes no runnable function; the message says why."""


class _Unresolved(Exception):
    pass


def find_templates(cdk_out: Path) -> list[Path]:
    """Templates in a ``cdk.out`` directory (``*.template.json``), sorted by name.

    Raises
    ------
    TemplateError
        If the directory does not exist or holds no template.
    """
    cdk_out = Path(cdk_out)
    if not cdk_out.is_dir():
        raise TemplateError(f"{cdk_out} is not a directory; run `npx cdk synth` first")
    found = sorted(cdk_out.glob("*.template.json"))
    if not found:
        raise TemplateError(f"no *.template.json in {cdk_out}; run `npx cdk synth` first")
    return found


def read_template(
    path: Path,
    *,
    region: str = "us-east-1",
    inline_code_dir: Path | None = None,
    fallback_code_dir: Path | None = None,
) -> LocalApp:
    """Read a CloudFormation template into a :class:`LocalApp`.

    Parameters
    ----------
    path : Path
        The template (JSON).
    region : str
        Region used for ``AWS::Region`` and ARNs.
    inline_code_dir : Path, optional
        Where to write ``Code.ZipFile`` sources (one sub-directory per function). Required only
        when the template has inline code.
    fallback_code_dir : Path, optional
        Code directory for functions with neither asset metadata nor inline code.

    Returns
    -------
    LocalApp
        Functions with their aliases, the gateway route, and warnings.

    Raises
    ------
    TemplateError
        If the file is missing or not JSON, has no Resources, no Lambda function, or a
        function that cannot be run locally (handler missing, no code location, bad values).
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise TemplateError(f"template {path} does not exist") from exc
    except json.JSONDecodeError as exc:
        raise TemplateError(f"template {path} is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("Resources"), dict):
        raise TemplateError(f"template {path} has no Resources section")
    reader = _Reader(doc, path.parent, region, inline_code_dir, fallback_code_dir)
    return reader.app()


class _Reader:
    def __init__(
        self,
        doc: Mapping[str, Any],
        base_dir: Path,
        region: str,
        inline_code_dir: Path | None,
        fallback_code_dir: Path | None,
    ) -> None:
        self.resources: Mapping[str, Mapping[str, Any]] = doc["Resources"]
        self.parameters: Mapping[str, Any] = doc.get("Parameters") or {}
        self.base_dir = base_dir
        self.region = region
        self.inline_code_dir = inline_code_dir
        self.fallback_code_dir = fallback_code_dir
        self.warnings: list[str] = []
        self._targets: list[tuple[str, str, str]] | None = None
        self.fn_names: dict[str, str] = {}
        for lid, res in self.resources.items():
            if res.get("Type") == "AWS::Lambda::Function":
                props = res.get("Properties") or {}
                name = props.get("FunctionName")
                self.fn_names[lid] = name if isinstance(name, str) and name else lid
        # published versions: number each function's AWS::Lambda::Version resources 1, 2, ...
        self.version_numbers: dict[str, str] = {}
        counters: dict[str, int] = {}
        for lid in sorted(self.resources):
            res = self.resources[lid]
            if res.get("Type") == "AWS::Lambda::Version":
                fn_lid = self._function_ref((res.get("Properties") or {}).get("FunctionName"))
                if fn_lid is None:
                    continue
                counters[fn_lid] = counters.get(fn_lid, 0) + 1
                self.version_numbers[lid] = str(counters[fn_lid])

    # ---- intrinsic functions ---------------------------------------------------------------
    def arn(self, fn_lid: str, qualifier: str | None = None) -> str:
        arn = f"arn:aws:lambda:{self.region}:{LOCAL_ACCOUNT_ID}:function:{self.fn_names[fn_lid]}"
        return f"{arn}:{qualifier}" if qualifier else arn

    def ref(self, name: str) -> str:
        pseudo = {
            "AWS::Region": self.region,
            "AWS::AccountId": LOCAL_ACCOUNT_ID,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": "local",
            "AWS::NoValue": "",
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            default = self.parameters[name].get("Default")
            if default is None:
                raise _Unresolved(f"parameter {name} has no Default")
            return str(default)
        res = self.resources.get(name)
        if res is None:
            raise _Unresolved(f"Ref to unknown {name}")
        rtype = res.get("Type")
        props = res.get("Properties") or {}
        if rtype == "AWS::Lambda::Function":
            return self.fn_names[name]
        if rtype == "AWS::Lambda::Alias":
            fn_lid = self._function_ref(props.get("FunctionName"))
            if fn_lid is None:
                raise _Unresolved(f"alias {name} names no function of this template")
            return self.arn(fn_lid, str(self.resolve(props.get("Name"))))
        if rtype == "AWS::Lambda::Version":
            fn_lid = self._function_ref(props.get("FunctionName"))
            if fn_lid is None:
                raise _Unresolved(f"version {name} names no function of this template")
            return self.arn(fn_lid, self.version_numbers[name])
        for key in ("Name", "TableName", "QueueName", "BucketName", "TopicName"):
            if isinstance(props.get(key), str):
                return str(props[key])
        return name

    def get_att(self, lid: str, attr: str) -> str:
        res = self.resources.get(lid)
        if res is None:
            raise _Unresolved(f"Fn::GetAtt on unknown {lid}")
        rtype = res.get("Type")
        if rtype == "AWS::Lambda::Function" and attr == "Arn":
            return self.arn(lid)
        if rtype == "AWS::Lambda::Version" and attr == "Version":
            return self.version_numbers[lid]
        if rtype == "AWS::Lambda::Alias" and attr in ("Arn", "AliasArn"):
            return self.ref(lid)
        if rtype == "AWS::Lambda::CapacityProvider" and attr == "Arn":
            return f"arn:aws:lambda:{self.region}:{LOCAL_ACCOUNT_ID}:capacity-provider:{lid}"
        if rtype == "AWS::SageMaker::Endpoint" and attr == "EndpointName":
            name = (res.get("Properties") or {}).get("EndpointName")
            return str(self.resolve(name)) if name is not None else lid
        raise _Unresolved(f"Fn::GetAtt {lid}.{attr} has no local value")

    def resolve(self, value: Any) -> Any:
        if isinstance(value, (str, int, float, bool)):
            return value
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, dict) and len(value) == 1:
            (key, arg), = value.items()
            if key == "Ref":
                return self.ref(str(arg))
            if key == "Fn::GetAtt":
                lid, attr = arg.split(".", 1) if isinstance(arg, str) else arg
                return self.get_att(str(lid), str(attr))
            if key == "Fn::Join":
                sep, parts = arg
                return str(sep).join(str(self.resolve(p)) for p in parts)
            if key == "Fn::Select":
                index, items = arg
                return self.resolve(items)[int(self.resolve(index))]
            if key == "Fn::Split":
                sep, text = arg
                return str(self.resolve(text)).split(sep)
            if key == "Fn::Sub":
                return self._sub(arg)
        raise _Unresolved(f"cannot resolve {json.dumps(value)[:120]} locally")

    def _sub(self, arg: Any) -> str:
        text, variables = (arg, {}) if isinstance(arg, str) else (arg[0], arg[1])

        def repl(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in variables:
                return str(self.resolve(variables[name]))
            if "." in name and not name.startswith("AWS::"):
                lid, attr = name.split(".", 1)
                return self.get_att(lid, attr)
            return self.ref(name)

        return re.sub(r"\$\{([^}!]+)\}", repl, text)

    def _function_ref(self, value: Any) -> str | None:
        """Logical ID of the function a FunctionName property refers to, if in this template."""
        if isinstance(value, dict):
            if "Ref" in value and value["Ref"] in self.fn_names:
                return str(value["Ref"])
            if "Fn::GetAtt" in value:
                arg = value["Fn::GetAtt"]
                lid = arg.split(".", 1)[0] if isinstance(arg, str) else arg[0]
                return str(lid) if lid in self.fn_names else None
        if isinstance(value, str):
            for lid, name in self.fn_names.items():
                if value == name or value.endswith(f":function:{name}"):
                    return lid
        return None

    # ---- resources ---------------------------------------------------------------------------
    def _asset_dir(self, lid: str) -> Path | None:
        meta = self.resources[lid].get("Metadata") or {}
        asset = meta.get("aws:asset:path")
        if not isinstance(asset, str):
            return None
        p = Path(asset)
        return (p if p.is_absolute() else (self.base_dir / p)).resolve()

    def _bundled(self, lid: str) -> bool:
        """False for an asset left at its source folder outside the cloud assembly (synthesized
        with bundling skipped, ``-c aws:cdk:bundling-stacks=[]``: CDK then points
        ``aws:asset:path`` at the source and still says ``aws:asset:is-bundled``)."""
        asset = self._asset_dir(lid)
        return asset is None or asset.is_relative_to(self.base_dir.resolve())

    def _code_dir(self, lid: str, props: Mapping[str, Any]) -> Path:
        asset = self._asset_dir(lid)
        if asset is not None:
            if not asset.is_dir():
                raise TemplateError(
                    f"function {lid}: code asset {asset} is missing; synthesize the app again"
                )
            if not self._bundled(lid):
                return self._unbundled_code_dir(lid, asset, str(props.get("Handler", "")))
            return asset
        code = props.get("Code") or {}
        if isinstance(code.get("ZipFile"), str):
            if self.inline_code_dir is None:
                raise TemplateError(f"function {lid} has inline code; pass inline_code_dir")
            target = Path(self.inline_code_dir) / lid
            target.mkdir(parents=True, exist_ok=True)
            module = str(props.get("Handler", "index.handler")).rsplit(".", 1)[0]
            (target / f"{module.replace('.', '/')}.py").write_text(code["ZipFile"])
            return target
        if self.fallback_code_dir is not None:
            self.warnings.append(
                f"function {lid}: no asset metadata or inline code; using {self.fallback_code_dir}"
            )
            return Path(self.fallback_code_dir)
        raise TemplateError(
            f"function {lid}: no code location (no aws:asset:path metadata, no Code.ZipFile); "
            "pass fallback_code_dir"
        )

    def _unbundled_code_dir(self, lid: str, source: Path, handler: str) -> Path:
        """The folder the handler module resolves from, for an unbundled (source) asset.

        A bundling step may copy the source folder into the package it is named after (the
        ``functions`` folder becomes ``functions/`` of the bundle); when the handler's module is
        not under ``source`` but is under its parent through that name, the parent is used.
        """
        module = handler.rsplit(".", 1)[0].replace(".", "/")
        if not module or any((source / f"{module}{ext}").exists() for ext in (".py", "/__init__.py")):
            return source
        top = module.split("/", 1)[0]
        if source.name == top and (source.parent / f"{module}.py").exists():
            self.warnings.append(
                f"function {lid}: asset not bundled; running {module}.py from {source.parent}")
            return source.parent
        return source

    def _layer_dirs(self, lid: str, props: Mapping[str, Any]) -> list[Path]:
        dirs = []
        for layer in props.get("Layers") or []:
            if isinstance(layer, dict) and "Ref" in layer and layer["Ref"] in self.resources:
                asset = self._asset_dir(str(layer["Ref"]))
                if asset is not None and asset.is_dir():
                    dirs.append(asset)
        return dirs

    def _own_layers(self, lid: str, props: Mapping[str, Any]) -> tuple[Path, ...] | None:
        """The function's layer folders when it can run with its own code and layers only (its
        code asset and every layer bundled in the cloud assembly), else ``None`` (it runs with
        this project's Python packages) with a warning saying why."""
        why = None
        if isinstance((props.get("Code") or {}).get("ZipFile"), str) or self._asset_dir(lid) is not None:
            if self._asset_dir(lid) is not None and not self._bundled(lid):
                why = "its code asset is not bundled (a source folder, or bundling was skipped)"
        else:
            why = "it has no code asset"
        dirs: list[Path] = []
        for layer in props.get("Layers") or []:
            ref = layer.get("Ref") if isinstance(layer, dict) else None
            asset = self._asset_dir(str(ref)) if ref in self.resources else None
            if asset is None or not asset.is_dir():
                why = why or f"layer {json.dumps(layer)[:120]} is not a layer asset of this template"
            elif not self._bundled(str(ref)):
                why = why or f"layer {ref} is not bundled (bundling was skipped)"
            else:
                dirs.append(asset)
        if why is None:
            return tuple(dirs)
        self.warnings.append(f"function {lid}: runs with this project's Python packages, not only "
                             f"its code and layers: {why}")
        return None

    def _environment(self, lid: str, props: Mapping[str, Any]) -> dict[str, str]:
        raw = ((props.get("Environment") or {}).get("Variables")) or {}
        layer_dirs = self._layer_dirs(lid, props)
        unbundled = any(isinstance(layer, dict) and layer.get("Ref") in self.resources
                        and not self._bundled(str(layer["Ref"])) for layer in props.get("Layers") or [])
        env: dict[str, str] = {}
        for key, value in raw.items():
            try:
                resolved = self.resolve(value)
            except (_Unresolved, KeyError, ValueError, IndexError, TypeError) as exc:
                self.warnings.append(f"function {lid}: env {key} left out ({exc})")
                continue
            text = str(resolved).lower() if isinstance(resolved, bool) else str(resolved)
            mapped = self._map_opt_path(lid, key, text, layer_dirs, quiet=unbundled)
            if mapped is None:
                self.warnings.append(
                    f"function {lid}: env {key}={text} left out: the layers are not bundled "
                    "(synthesized with bundling skipped), so nothing is at that /opt path; the "
                    "function's default applies")
                continue
            env[key] = mapped
        return env

    def _map_opt_path(self, lid: str, key: str, value: str, layer_dirs: Sequence[Path], *,
                      quiet: bool = False) -> str | None:
        """Lambda extracts layers into /opt; map /opt/<rel> to the layer asset holding <rel>.

        With ``quiet`` (unbundled layers) an unmapped /opt path gives None: leave it out."""
        if not value.startswith("/opt/") or Path(value).exists():
            return value
        rel = value[len("/opt/"):]
        for layer in layer_dirs:
            if (layer / rel).exists():
                return str(layer / rel)
        if quiet:
            return None
        self.warnings.append(
            f"function {lid}: env {key}={value} points into /opt but no layer asset holds it"
        )
        return value

    def _function(self, lid: str) -> FunctionSpec:
        props = self.resources[lid].get("Properties") or {}
        handler = props.get("Handler")
        if not isinstance(handler, str):
            raise TemplateError(f"function {lid}: Handler is missing (container images are not run)")
        runtime = str(props.get("Runtime", ""))
        if not runtime.startswith("python"):
            raise TemplateError(
                f"function {lid}: runtime {runtime or '(none)'} is not Python; the emulator "
                "runs Python functions only"
            )
        snap = props.get("SnapStart") or {}
        aliases = []
        for alias_lid, res in self.resources.items():
            if res.get("Type") != "AWS::Lambda::Alias":
                continue
            aprops = res.get("Properties") or {}
            if self._function_ref(aprops.get("FunctionName")) != lid:
                continue
            try:
                version = str(self.resolve(aprops.get("FunctionVersion")))
                name = str(self.resolve(aprops.get("Name")))
            except _Unresolved as exc:
                raise TemplateError(f"alias {alias_lid}: {exc}") from exc
            pc = (aprops.get("ProvisionedConcurrencyConfig") or {}).get(
                "ProvisionedConcurrentExecutions", 0
            )
            try:
                aliases.append(AliasSpec(name=name, version=version, provisioned_concurrency=int(pc)))
            except SpecError as exc:
                raise TemplateError(f"alias {alias_lid}: {exc}") from exc
        reserved = props.get("ReservedConcurrentExecutions")
        try:
            return FunctionSpec(
                name=self.fn_names[lid],
                handler=handler,
                code_dir=self._code_dir(lid, props),
                runtime=runtime,
                memory_mb=int(props.get("MemorySize", DEFAULT_MEMORY_MB)),
                timeout_s=float(props.get("Timeout", DEFAULT_TIMEOUT_S)),
                environment=self._environment(lid, props),
                snap_start=snap.get("ApplyOn") == "PublishedVersions",
                reserved_concurrency=None if reserved is None else int(reserved),
                aliases=tuple(sorted(aliases, key=lambda a: a.name)),
                logical_id=lid,
                layers=self._own_layers(lid, props),
                architecture=str((props.get("Architectures") or ["x86_64"])[0]),
            )
        except SpecError as exc:
            raise TemplateError(f"function {lid}: {exc}") from exc

    def _managed_instances(self, lid: str) -> ManagedInstancesConfig | None:
        """The function's Lambda Managed Instances settings, None when it is not on a capacity
        provider: ``CapacityProviderConfig`` (provider ARN, ``PerExecutionEnvironmentMaxConcurrency``,
        ``ExecutionEnvironmentMemoryGiBPerVCpu``), its published version's
        ``FunctionScalingConfig``, and the provider's ``MaxVCpuCount`` and first allowed instance
        type when the template creates it (a provider taken by ARN: the emulator's defaults).
        Raises TemplateError."""
        props = self.resources[lid].get("Properties") or {}
        block = (props.get("CapacityProviderConfig") or {}).get(
            "LambdaManagedInstancesCapacityProviderConfig")
        if not block:
            return None
        try:
            settings: dict[str, Any] = {
                "capacity_provider_arn": str(self.resolve(block.get("CapacityProviderArn")))}
        except _Unresolved as exc:
            raise TemplateError(f"function {lid}: CapacityProviderArn: {exc}") from exc
        if block.get("PerExecutionEnvironmentMaxConcurrency") is not None:
            settings["per_environment_max_concurrency"] = int(block["PerExecutionEnvironmentMaxConcurrency"])
        if block.get("ExecutionEnvironmentMemoryGiBPerVCpu") is not None:
            settings["memory_gib_per_vcpu"] = float(block["ExecutionEnvironmentMemoryGiBPerVCpu"])
        ref = block.get("CapacityProviderArn")
        provider_lid = ref["Fn::GetAtt"][0] if isinstance(ref, Mapping) and "Fn::GetAtt" in ref else None
        provider = self.resources.get(str(provider_lid)) if provider_lid else None
        if provider is not None and provider.get("Type") == "AWS::Lambda::CapacityProvider":
            pprops = provider.get("Properties") or {}
            max_vcpu = (pprops.get("CapacityProviderScalingConfig") or {}).get("MaxVCpuCount")
            if max_vcpu is not None:
                settings["max_vcpu"] = int(max_vcpu)
            types = (pprops.get("InstanceRequirements") or {}).get("AllowedInstanceTypes") or []
            if types and instance_vcpus(str(types[0])) is not None:
                settings["instance_type"] = str(types[0])
                settings["instance_vcpus"] = instance_vcpus(str(types[0]))
        for version_lid, res in sorted(self.resources.items()):
            vprops = res.get("Properties") or {}
            if res.get("Type") == "AWS::Lambda::Version" and self._function_ref(
                    vprops.get("FunctionName")) == lid and vprops.get("FunctionScalingConfig"):
                scaling = vprops["FunctionScalingConfig"]
                if scaling.get("MinExecutionEnvironments") is not None:
                    settings["min_execution_environments"] = int(scaling["MinExecutionEnvironments"])
                if scaling.get("MaxExecutionEnvironments") is not None:
                    settings["max_execution_environments"] = int(scaling["MaxExecutionEnvironments"])
                break
        try:
            return ManagedInstancesConfig(**settings)
        except ValueError as exc:
            raise TemplateError(f"function {lid}: {exc}") from exc

    def _integrations(self, functions: Sequence[FunctionSpec]) -> dict[str, tuple[str, str]]:
        """Integration logical ID -> (function name, qualifier) for Lambda proxy integrations
        on functions of this template."""
        names = {f.name for f in functions}
        out: dict[str, tuple[str, str]] = {}
        for lid in sorted(self.resources):
            res = self.resources[lid]
            if res.get("Type") != "AWS::ApiGatewayV2::Integration":
                continue
            try:
                uri = str(self.resolve((res.get("Properties") or {}).get("IntegrationUri")))
            except (_Unresolved, KeyError, ValueError, IndexError, TypeError) as exc:
                self.warnings.append(f"integration {lid}: {exc}")
                continue
            match = _ARN_FUNCTION.search(uri)
            if match and match.group(1) in names:
                out[lid] = (match.group(1), match.group(2) or "$LATEST")
        return out

    def _route_targets(self) -> list[tuple[str, str, str]]:
        """(logical ID, RouteKey, Target) of each ``AWS::ApiGatewayV2::Route``; one that cannot
        be resolved is left out with a warning (once)."""
        if self._targets is None:
            self._targets = []
            for lid in sorted(self.resources):
                res = self.resources[lid]
                if res.get("Type") != "AWS::ApiGatewayV2::Route":
                    continue
                props = res.get("Properties") or {}
                try:
                    key = str(self.resolve(props.get("RouteKey")))
                    target = str(self.resolve(props.get("Target")))
                except (_Unresolved, KeyError, ValueError, IndexError, TypeError) as exc:
                    self.warnings.append(f"route {lid} left out ({exc})")
                    continue
                self._targets.append((lid, key, target))
        return self._targets

    def _routes(self, functions: Sequence[FunctionSpec]) -> tuple[GatewayRoute | None, tuple[GatewayRoute, ...]]:
        """The ``$default`` route and the other routes (RouteKey -> integration -> alias).

        Without ``AWS::ApiGatewayV2::Route`` resources (a hand-written template), the first
        integration is the ``$default`` route; without integrations, the function with a
        ``live`` alias (or the only function)."""
        integrations = self._integrations(functions)
        default: GatewayRoute | None = None
        others: list[GatewayRoute] = []
        routed = False
        for lid, key, target in self._route_targets():
            integration = target.removeprefix("integrations/")
            if integration not in integrations:
                self.warnings.append(f"route {lid} ({key}) left out: its target {target} is not a "
                                     "Lambda integration of this template")
                continue
            routed = True
            route = GatewayRoute(*integrations[integration], route_key=key)
            if key == "$default":
                default = route
            else:
                others.append(route)
        if not routed and integrations:
            default = GatewayRoute(*next(iter(integrations.values())))
        if default is None and not routed:
            with_live = [f for f in functions if any(a.name == "live" for a in f.aliases)]
            if len(with_live) == 1:
                default = GatewayRoute(with_live[0].name, "live")
            elif len(functions) == 1:
                default = GatewayRoute(functions[0].name, "$LATEST")
        return default, tuple(sorted(others, key=lambda r: r.route_key))

    def _parameters(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for lid in sorted(self.resources):
            res = self.resources[lid]
            if res.get("Type") != "AWS::SSM::Parameter":
                continue
            props = res.get("Properties") or {}
            try:
                name, value = str(self.resolve(props.get("Name"))), self.resolve(props.get("Value"))
            except (_Unresolved, KeyError, ValueError, IndexError, TypeError) as exc:
                self.warnings.append(f"parameter {lid} left out ({exc})")
                continue
            out[name] = str(value)
        return out

    def _throttle(self, lid: str, settings: Any) -> RouteThrottle | None:
        """``ThrottlingRateLimit``/``ThrottlingBurstLimit`` of a RouteSettings object; one left
        out is the account-level limit (API Gateway's quotas); None when both are."""
        if not isinstance(settings, dict):
            return None
        rate, burst = settings.get("ThrottlingRateLimit"), settings.get("ThrottlingBurstLimit")
        if rate is None and burst is None:
            return None
        try:
            return RouteThrottle(float(self.resolve(rate)) if rate is not None else ACCOUNT_RATE_PER_S,
                                 int(self.resolve(burst)) if burst is not None else ACCOUNT_BURST)
        except (_Unresolved, TypeError, ValueError, SpecError) as exc:
            raise TemplateError(f"stage {lid}: throttling {json.dumps(settings)[:120]}: {exc}") from exc

    def _stage(self) -> StageSettings:
        """The HTTP API stage's throttling (``DefaultRouteSettings``, ``RouteSettings`` by route
        key) and each route's integration ``TimeoutInMillis``. With several stages, the
        ``$default`` one (what the local gateway serves), else the first by logical ID."""
        stages = [(lid, self.resources[lid].get("Properties") or {}) for lid in sorted(self.resources)
                  if self.resources[lid].get("Type") == "AWS::ApiGatewayV2::Stage"]
        chosen = next((st for st in stages if st[1].get("StageName") == "$default"),
                      stages[0] if stages else None)
        default, by_route = None, {}
        if chosen is not None:
            lid, props = chosen
            default = self._throttle(lid, props.get("DefaultRouteSettings"))
            for key, settings in (props.get("RouteSettings") or {}).items():
                throttle = self._throttle(lid, settings)
                if throttle is not None:
                    by_route[str(key)] = throttle
        timeouts: dict[str, float] = {}
        for _lid, key, target in self._route_targets():
            target = target.removeprefix("integrations/")
            millis = ((self.resources.get(target) or {}).get("Properties") or {}).get("TimeoutInMillis")
            if millis is not None:
                try:
                    timeouts[key] = float(self.resolve(millis)) / 1000.0
                except (_Unresolved, TypeError, ValueError) as exc:
                    raise TemplateError(f"integration {target}: TimeoutInMillis: {exc}") from exc
        try:
            return StageSettings(default, by_route, timeouts)
        except SpecError as exc:
            raise TemplateError(str(exc)) from exc

    def app(self) -> LocalApp:
        lids = [lid for lid, r in self.resources.items() if r.get("Type") == "AWS::Lambda::Function"]
        if not lids:
            raise TemplateError("the template has no AWS::Lambda::Function resource")
        functions = tuple(self._function(lid) for lid in sorted(lids))
        (gateway, routes), parameters = self._routes(functions), self._parameters()
        managed = {self.fn_names[lid]: config for lid in sorted(lids)
                   if (config := self._managed_instances(lid)) is not None}
        return LocalApp(functions=functions, gateway=gateway, warnings=tuple(self.warnings),
                        parameters=parameters, routes=routes, stage=self._stage(),
                        managed_instances=managed)
