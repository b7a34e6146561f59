"""Serve an ASGI app (FastAPI first) behind Mangum, with the external prefix as ``root_path``.

:func:`make_adapter` wraps Mangum (``lifespan="off"``: the toolkit runs the app's lifespan once
per execution environment, `functions.runtime.lifespan`, where Mangum's own would re-run it on
every invocation, mangum #342) and changes only what Mangum 0.22 gets wrong for the event
sources the toolkit accepts:

* **One event loop.** Every request runs on the execution environment's loop
  (`functions.runtime.lifespan.AppLoop`), whichever thread calls, one at a time; each request's
  scope gets a copy of the lifespan state (``scope["state"]``) and the agent's runtime
  (``scope["warmstart.runtime"]``, what `functions.runtime.depends.agent_runtime` returns).
* **The app's failures are the caller's to answer.** An exception that escapes the app (after
  Starlette's ``500 text/plain``) is raised to the caller as :class:`AppFailure`, and a route
  given ``cancel_after_s`` is cancelled when it runs past it (a ``TimeoutError`` failure), so
  the dispatcher answers with the route's degraded answer or the JSON error contract.
* **The answer leaves when its last body message is sent.** Starlette runs a response's
  background tasks (FastAPI's ``BackgroundTasks``) inside the app call, after the final
  ``http.response.body``, and Mangum returns only when the app call ends. Here the call returns
  as soon as the response is complete; the rest of the app's coroutine (the background tasks)
  stays on the environment's loop and is finished by :meth:`Adapter.finish_background`: in the
  invocation's post-response phase when ``after_response`` takes it (the toolkit's extension,
  `functions.runtime.post_response`), else before the call returns, bounded by the
  invocation's remaining time. What the app raises after its response, or work cut at the
  deadline, is reported (``on_background_failure``) and never changes the answer.

* **External prefixes.** Mangum routes on the event's whole path (its ``api_gateway_base_path``
  strips one configured prefix without a ``/`` boundary, so ``/lookupx`` becomes ``x``, and
  knows no stage) and always sets ``root_path`` to ``""``, so ``request.url``, ``url_for``,
  redirects and FastAPI's docs page point outside the app. Here
  :func:`functions.runtime.events.split_path` finds the prefix (stage, custom-domain mapping,
  configured prefixes, the agent's base path) and the ASGI scope gets ``root_path`` = that prefix
  and ``path`` = prefix + the app's path: Starlette 0.33+ routes on ``path`` minus ``root_path``
  (``starlette._utils.get_route_path``) and builds URLs from ``path`` alone, per the ASGI spec.
* **Redirects.** Starlette builds absolute ``Location`` URLs from the ``Host`` header, which an
  ALB passes on from the client. A ``Location`` on the request's own host is made relative
  (``/prod/lookup/items/?q=1``): same target, nothing taken from ``Host``.
* **Text or base64.** Mangum returns a body as text when one of its ``text_mime_types`` is a
  *substring* of the ``Content-Type`` header (case-sensitive, parameters included), so
  ``application/problem+json`` or ``image/svg+xml`` go out base64 (a REST API without
  ``binaryMediaTypes`` then hands the client base64). Here a response is text when its media
  type (parameters dropped, case-insensitive) matches :data:`DEFAULT_TEXT_MIME_TYPES` or the
  agent's list, including any structured-syntax suffix ``+json`` / ``+xml`` (RFC 6839), and its
  bytes are UTF-8; base64 otherwise. Mangum gets the same list, so it is already right in the
  common case and the check afterwards corrects only the rest.

A streaming route's answer is run by `functions.runtime.asgi_stream` (same scope, same loop,
the same keeping of the app's work after its answer), chunk by chunk.

Imports only the standard library; Mangum is imported by :func:`make_adapter` (the web stage).

References
----------
https://asgi.readthedocs.io/en/latest/specs/www.html#http-connection-scope (``root_path``),
https://www.rfc-editor.org/rfc/rfc6839 (structured syntax suffixes),
https://www.rfc-editor.org/rfc/rfc9110#section-10.2.2 (a relative ``Location`` is allowed),
https://docs.aws.amazon.com/apigateway/latest/developerguide/api-gateway-payload-encodings.html
"""

from __future__ import annotations

import asyncio
import binascii
import sys
import time
from base64 import b64decode, b64encode
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any
from urllib.parse import unquote, urlsplit

from functions.runtime.errors import AppFailure
from functions.runtime.events import HttpRequest, normalize_prefix, parse_http_event
from functions.runtime.lifespan import CANCEL_GRACE_S, AppLoop

__all__ = [
    "DEFAULT_TEXT_MIME_TYPES",
    "Adapter",
    "AppFailure",
    "TextMimeTypes",
    "describe_scope",
    "make_adapter",
    "uses_background_tasks",
]

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]

#: Media types answered as text. ``type/`` matches a whole top-level type, ``+suffix`` any
#: subtype with that structured-syntax suffix (RFC 6839), anything else one media type exactly.
#: Mangum 0.22's defaults (``text/``, ``application/json``, ``application/javascript``,
#: ``application/xml``, ``application/vnd.api+json``, ``application/vnd.oai.openapi``) plus the
#: ``+json`` and ``+xml`` suffixes (problem details, JSON:API, JSON-LD, SVG, Atom, ...).
DEFAULT_TEXT_MIME_TYPES: tuple[str, ...] = (
    "text/",
    "application/json",
    "application/javascript",
    "application/xml",
    "application/vnd.oai.openapi",
    "+json",
    "+xml",
)

#: Longest the app's work after a response (background tasks) may run before the call returns
#: when the invocation's deadline is unknown (a call without a Lambda context), s: Lambda's
#: maximum function timeout. https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html
BACKGROUND_LIMIT_S = 900.0
#: Background work finished before the call returns stops this long before the invocation's
#: deadline, ms (the handler still has to return; as `functions.runtime.post_response`).
BACKGROUND_MARGIN_MS = 100.0

_set_event_loop = asyncio.set_event_loop

BackgroundFailure = Callable[[BaseException, Scope], None]
"""Told of the app's failure after its response: ``(error, the request's ASGI scope)``; a
``TimeoutError`` when the work was cut at the invocation's deadline."""


class TextMimeTypes:
    """Which ``Content-Type`` values are text (see :data:`DEFAULT_TEXT_MIME_TYPES`).

    Parameters
    ----------
    patterns : Iterable[str]
        ``type/`` (or ``type/*``), ``+suffix``, or an exact ``type/subtype``; case-insensitive.

    Raises
    ------
    ValueError
        An empty pattern or one that is none of the three forms.
    """

    def __init__(self, patterns: Iterable[str]) -> None:
        exact: set[str] = set()
        prefixes: list[str] = []
        suffixes: list[str] = []
        for raw in patterns:
            pattern = raw.strip().lower()
            if pattern.endswith("/*"):
                pattern = pattern[:-1]
            top, slash, sub = pattern.partition("/")
            a_type = bool(slash) and top != "" and not top.startswith("+") and "/" not in sub
            if not slash and top.startswith("+") and len(top) > 1:
                suffixes.append(pattern)
            elif a_type and sub:
                exact.add(pattern)
            elif a_type:
                prefixes.append(pattern)
            else:
                raise ValueError(
                    f"text MIME type {raw!r}: use 'type/' for a whole type, '+suffix' for a "
                    "structured-syntax suffix, or an exact 'type/subtype'"
                )
        self.patterns: tuple[str, ...] = (*prefixes, *sorted(exact), *suffixes)
        self._exact = frozenset(exact)
        self._prefixes = tuple(prefixes)
        self._suffixes = tuple(suffixes)
        self._cache: dict[str, bool] = {}

    def __call__(self, content_type: str) -> bool:
        """True when a response with this ``Content-Type`` header value is text."""
        known = self._cache.get(content_type)
        if known is not None:
            return known
        media = content_type.partition(";")[0].strip().lower()
        text = (
            media in self._exact
            or media.startswith(self._prefixes)
            or (media.endswith(self._suffixes) and "/" in media)
        )
        if len(self._cache) < 256:  # header values an app sends are few; bounded anyway
            self._cache[content_type] = text
        return text


def _header(headers: object, name: str) -> str | None:
    """A header's value from a Lambda event or response header map (any case, list or not)."""
    if not headers or not isinstance(headers, Mapping):
        return None
    value = headers.get(name)
    if value is None:
        for key, item in headers.items():
            if type(key) is str and key.lower() == name:
                value = item
                break
    if isinstance(value, list):
        value = value[0] if value else None
    return value if isinstance(value, str) else None


def _hosts(event: Mapping[str, Any]) -> set[str]:
    """Every ``Host`` value the event carries (lower case; both header maps, any name case):
    the app may have built an absolute URL from any of them (REST merges the maps)."""
    hosts = set()
    for key in ("headers", "multiValueHeaders"):
        headers = event.get(key)
        if not headers or not isinstance(headers, Mapping):
            continue
        for name, value in headers.items():
            if type(name) is str and len(name) == 4 and name.lower() == "host":
                for item in value if isinstance(value, list) else [value]:
                    if isinstance(item, str):
                        hosts.add(item.lower())
    return hosts


def _host_only(authority: str) -> str:
    """``host`` of ``host:port`` (a numeric port), else the authority as it is."""
    host, sep, port = authority.rpartition(":")
    return host if sep and port.isdigit() else authority


def _relative_location(location: str, hosts: set[str]) -> str | None:
    """``location`` as a path-absolute reference when it points at one of ``hosts`` (or at
    Mangum's stand-in host ``mangum`` when the request had none), else None."""
    if "://" not in location:
        return None
    try:
        parts = urlsplit(location)
    except ValueError:
        return None
    netloc = parts.netloc.lower()
    decoded = unquote(netloc)  # Starlette percent-encodes what it redirects to
    if (netloc not in hosts and netloc.partition(":")[0] != "mangum" and decoded not in hosts
            and _host_only(decoded) not in {_host_only(h) for h in hosts}):  # it adds ":80"
        return None
    relative = parts.path or "/"
    if relative.startswith("//"):  # would read as another host
        return None
    if parts.query:
        relative += "?" + parts.query
    if parts.fragment:
        relative += "#" + parts.fragment
    return relative


class Adapter:
    """A Lambda handler for one ASGI app: ``adapter(event, context) -> response``.

    Build it with :func:`make_adapter`. Calls from several threads take turns on the one
    event loop (``loop``).

    Attributes
    ----------
    app : ASGIApp
        The wrapped app.
    mangum : mangum.Mangum
        The Mangum handler whose event handlers build the scope and the response
        (``lifespan="off"``); the adapter runs the app's HTTP cycle itself.
    base_path : str
        The agent's prefix, normalized (``""`` for none).
    strip_prefixes : tuple[str, ...]
        Further prefixes, normalized.
    text_mime_types : TextMimeTypes
        What is answered as text.
    relative_redirects : bool
        Whether ``Location`` headers on the request's own host are made relative.
    loop : AppLoop
        The execution environment's event loop.
    runtime : Any
        Put in every request's scope as ``warmstart.runtime`` (None: not put).
    lifespan_state : dict[str, Any] | None
        The lifespan state copied into each request's ``scope["state"]`` (None: not set).
    after_response : Callable[[Any], bool] | None
        Called with the Lambda context when the app still has work after its response (its
        background tasks); True: the caller runs :meth:`finish_background` after the response
        is sent (the post-response phase). None or False: the call finishes that work before
        it returns, bounded by the context's remaining time (:data:`BACKGROUND_LIMIT_S`
        without one).
    on_background_failure : BackgroundFailure
        Told of a failure of that work (default: logged with its traceback on ``warmstart``).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        base_path: str | None,
        strip_prefixes: Iterable[str],
        text_mime_types: Iterable[str],
        exclude_headers: Iterable[str],
        relative_redirects: bool,
        loop: AppLoop | None = None,
        runtime: Any = None,
    ) -> None:
        from mangum import Mangum

        self.app = app
        self.loop = loop if loop is not None else AppLoop()
        self.runtime = runtime
        self.lifespan_state: dict[str, Any] | None = None
        self.after_response: Callable[[Any], bool] | None = None
        self.on_background_failure: BackgroundFailure = _log_background_failure
        self.base_path = normalize_prefix(base_path)
        self.strip_prefixes = tuple(normalize_prefix(p) for p in strip_prefixes)
        self.text_mime_types = TextMimeTypes(text_mime_types)
        self.relative_redirects = relative_redirects
        self._cycle = _cycle_class()
        #: the app's runs still going after their response (background tasks) -> their cycle
        self._tails: dict[asyncio.Task[None], Any] = {}
        # Mangum matches its list as substrings of the header: the same patterns make it right
        # for the usual lower-case header values, so __call__ rarely re-encodes a body.
        substrings = list(self.text_mime_types.patterns) or ["\x00"]
        options: dict[str, Any] = {"lifespan": "off", "text_mime_types": substrings,
                                   "exclude_headers": list(exclude_headers),
                                   "custom_handlers": _scope_once_handlers()}
        self.mangum = Mangum(self._asgi, **options)

    def __call__(
        self, event: dict[str, Any], context: Any, request: HttpRequest | None = None,
        cancel_after_s: float | None = None,
    ) -> dict[str, Any]:
        """Run the app for one HTTP event; returns once its response is complete.

        Parameters
        ----------
        event : dict[str, Any]
            An HTTP API (2.0), function URL, REST API (1.0) or ALB event.
        context : Any
            The Lambda context (passed on in the scope as ``aws.context``).
        request : HttpRequest | None
            The event as :func:`functions.runtime.events.parse_http_event` parsed it, with the
            same ``base_path`` and ``strip_prefixes`` (the dispatcher has it: saves a second
            parse); None parses here.
        cancel_after_s : float | None
            Cancel the app's request after this long, s (a degradable route's budget), unless
            its response is complete by then (its background tasks are not cut); None: let it
            run.

        Returns
        -------
        dict[str, Any]
            The response in the event source's format.

        Raises
        ------
        BadRequest
            ``request`` is None and the event is malformed.
        AppFailure
            The app raised before its response was complete, or ran past ``cancel_after_s``.
        """
        if request is None:
            request = parse_http_event(event, base_path=self.base_path, strip_prefixes=self.strip_prefixes)
        apploop = self.loop
        with apploop.lock:  # one run at a time, on the environment's loop
            loop = apploop.loop
            _set_event_loop(loop)
            handler = self.mangum.infer(event, context)
            scope = handler.scope
            cycle = self._cycle(scope, handler.body, loop.create_future(), cancel_after_s,
                                self.on_background_failure)
            # the scope completed here, and the app run without `_asgi` (which a direct call
            # of ``self.mangum`` goes through): one coroutine fewer on every step of the run
            self.prepare_scope(scope, request)
            task = loop.create_task(cycle.run(self.app))
            if cancel_after_s is not None:  # started with the run (its first step comes first)
                cycle.timer = loop.call_at(loop.time() + max(0.0, cancel_after_s), cycle.cut, task)
            loop.run_until_complete(cycle.sent)  # the final body, or the app's end
            if cycle.answering is not None and not task.done():
                loop.run_until_complete(task)  # an error answer: is the app failing?
            if not task.done():  # work after the response: the app's background tasks
                self.keep_tail(task, cycle, context)
            response: dict[str, Any] = handler(
                {"status": cycle.status, "headers": cycle.headers, "body": cycle.body})
        failure = cycle.failure
        if failure is not None:
            raise AppFailure(failure[0], response, cut=failure[1])
        return self.finish_response(response, event)

    def finish_response(self, response: dict[str, Any], event: Mapping[str, Any]) -> dict[str, Any]:
        """What Mangum built from the app's complete answer, corrected (in place): text or
        base64 by :attr:`text_mime_types`, ``Location`` made relative (:attr:`relative_redirects`).
        Returns ``response``."""
        headers = response.get("headers")
        content_type = headers.get("content-type") if headers else None
        if content_type is None:
            content_type = _header(response.get("multiValueHeaders"), "content-type")
        if content_type is not None and response.get("body"):
            text = self.text_mime_types(content_type)
            if text is bool(response.get("isBase64Encoded")):
                self._reencode(response, text)
        if self.relative_redirects and 300 <= response.get("statusCode", 200) < 400:
            self._relative_redirect(response, event)
        return response

    # -- the app's work after its response ---------------------------------------------------
    @property
    def background_pending(self) -> int:
        """How many of the app's runs still have work after their response."""
        return len(self._tails)

    def finish_background(self, until_ms: float) -> None:
        """Run the app's work after its responses (background tasks) to its end, at most until
        ``until_ms``; what is still running then is cancelled (given
        :data:`functions.runtime.lifespan.CANCEL_GRACE_S` to unwind) and reported as a
        ``TimeoutError``. Never raises for the app's failures (each is reported).

        Parameters
        ----------
        until_ms : float
            Epoch time the work may run until, ms (the post-response phase's bound: the
            invocation's deadline less a margin, `functions.runtime.post_response.Work`).
        """
        if not self._tails:
            return
        apploop = self.loop
        with apploop.lock:
            _set_event_loop(apploop.loop)
            self._finish(until_ms)

    def keep_tail(self, task: asyncio.Task[None], cycle: Any, context: Any) -> None:
        """Keep the app's run ``task``, still going after its response (its background tasks):
        handed to ``after_response`` (the post-response phase), else finished now, bounded by
        the invocation's remaining time. Call it with the loop's lock held.

        Parameters
        ----------
        task : asyncio.Task[None]
            The app's run on this adapter's loop.
        cycle : Any
            Its request cycle: ``report(error)`` is told of a failure or a cut.
        context : Any
            The Lambda context (``get_remaining_time_in_millis``), or None.
        """
        self._tails[task] = cycle
        task.add_done_callback(self._tail_done)
        after = self.after_response
        if after is None or not after(context):
            self._finish(_deadline_ms(context))

    def _finish(self, until_ms: float) -> None:
        """`finish_background` with the loop's lock held."""
        tails = dict(self._tails)
        if tails:
            timeout_s = max(0.0, (until_ms - time.time() * 1000.0) / 1000.0)
            self.loop.loop.run_until_complete(_wait_tails(tails, timeout_s))

    def _tail_done(self, task: asyncio.Task[None]) -> None:
        self._tails.pop(task, None)
        if not task.cancelled():
            task.exception()  # retrieved (the cycle reported it): no "never retrieved" warning

    async def _asgi(self, scope: Scope, receive: Any, send: Any) -> None:
        """The app as a direct call of ``self.mangum`` runs it: the scope completed from its
        event (`__call__` completes it and runs the app itself)."""
        if scope["type"] == "http":
            event = scope.get("aws.event")
            request = (
                parse_http_event(event, base_path=self.base_path, strip_prefixes=self.strip_prefixes)
                if event is not None
                else None
            )
            self.prepare_scope(scope, request)
        await self.app(scope, receive, send)

    def prepare_scope(self, scope: Scope, request: HttpRequest | None) -> None:
        """Complete Mangum's ASGI ``http`` scope for the app (in place): ``root_path`` and
        ``path`` from the external prefix ``request`` found, ``state`` (a shallow copy of the
        lifespan state), ``warmstart.runtime``. `functions.runtime.asgi_stream` builds its
        scope with it too."""
        if request is not None and request.root_path:
            root, path = request.root_path, request.path
            if "%" in root or "%" in path:  # Mangum's scope path is percent-decoded too
                root, path = unquote(root), unquote(path)
            scope["root_path"] = root
            scope["path"] = root + path
        state = self.lifespan_state
        if state is not None:  # a shallow copy per request, as uvicorn does
            scope["state"] = state.copy()
        if self.runtime is not None:
            scope["warmstart.runtime"] = self.runtime

    @staticmethod
    def _reencode(response: dict[str, Any], text: bool) -> None:
        body = response["body"]
        if text:  # Mangum sent text as base64: decode it when it is UTF-8
            try:
                response["body"] = b64decode(body).decode("utf-8")
            except (binascii.Error, ValueError):
                return
            response["isBase64Encoded"] = False
        else:  # Mangum sent a non-text type as text (its substring match): base64 it
            response["body"] = b64encode(body.encode("utf-8", "surrogatepass")).decode("ascii")
            response["isBase64Encoded"] = True

    @staticmethod
    def _relative_redirect(response: dict[str, Any], event: Mapping[str, Any]) -> None:
        host = _hosts(event)
        headers = response.get("headers")
        if headers:
            for key, value in headers.items():
                if key.lower() == "location" and isinstance(value, str):
                    relative = _relative_location(value, host)
                    if relative is not None:
                        headers[key] = relative
        multi = response.get("multiValueHeaders")
        if multi:
            for key, values in multi.items():
                if key.lower() == "location" and isinstance(values, list):
                    multi[key] = [
                        (_relative_location(v, host) or v) if isinstance(v, str) else v for v in values
                    ]


def uses_background_tasks(app: Any) -> bool:
    """True when a route of ``app`` (FastAPI, its mounted and included sub-apps) takes
    FastAPI's ``BackgroundTasks``, in its signature or in one of its dependencies. A response
    made with Starlette's ``background=`` is not seen (False for it and for other ASGI apps)."""
    seen: set[int] = set()
    todo: list[Any] = [app]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        dependant = getattr(node, "dependant", None)
        if dependant is not None:
            stack = [dependant]
            while stack:
                dep = stack.pop()
                if getattr(dep, "background_tasks_param_name", None):
                    return True
                stack.extend(getattr(dep, "dependencies", ()) or ())
        routes = getattr(node, "routes", None)
        if isinstance(routes, list):
            todo.extend(routes)
        for attr in ("app", "router", "original_router"):  # a mount, an included router
            sub = getattr(node, attr, None)
            if sub is not None and sub is not node:
                todo.append(sub)
    return False


def _deadline_ms(context: Any) -> float:
    """Epoch ms the app's work after its response may run until when it runs before the call
    returns: the invocation's deadline less :data:`BACKGROUND_MARGIN_MS` (the context's
    ``get_remaining_time_in_millis``), else :data:`BACKGROUND_LIMIT_S` from now."""
    now_ms = time.time() * 1000.0
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if callable(remaining):
        try:
            return now_ms + float(remaining()) - BACKGROUND_MARGIN_MS
        except (TypeError, ValueError):
            pass
    return now_ms + BACKGROUND_LIMIT_S * 1000.0


def describe_scope(scope: Scope) -> tuple[str | None, str]:
    """``(request id, "METHOD /path")`` of a request's scope, for a failure's report."""
    context = scope.get("aws.context")
    request_id = getattr(context, "aws_request_id", None)
    return (request_id if isinstance(request_id, str) else None,
            f"{scope.get('method', '')} {scope.get('path', '')}")


def _log_background_failure(error: BaseException, scope: Scope) -> None:
    """The default report of a failure after the response: logged with its traceback."""
    import logging

    request_id, target = describe_scope(scope)
    logging.getLogger("warmstart").error(
        "the app's work after its response failed (%s, request %s): %s: %s; the answer was "
        "already sent", target, request_id, type(error).__name__, error,
        exc_info=(type(error), error, error.__traceback__))


async def _wait_tails(tails: Mapping[asyncio.Task[None], Any], timeout_s: float) -> None:
    """Wait for ``tails`` (tasks -> their cycle) at most ``timeout_s``; cancel and report what
    is left (a ``TimeoutError`` each), then give it :data:`CANCEL_GRACE_S` to unwind."""
    _, pending = await asyncio.wait(tails, timeout=timeout_s) if timeout_s > 0 else (set(), set(tails))
    pending = {task for task in pending if not task.done()}
    if not pending:
        return
    for task in pending:
        cycle = tails[task]
        error = TimeoutError(f"the app's work after its response was still running at the "
                             f"invocation's deadline ({timeout_s * 1000:.0f} ms left for it) and "
                             "was cancelled")
        cycle.report(error)
        task.cancel()
    await asyncio.wait(pending, timeout=CANCEL_GRACE_S)


_CYCLE: list[type] = []


def _cycle_class() -> type:
    """Mangum's HTTP cycle (`mangum.protocols.http.HTTPCycle`), handing the response back as
    soon as it is complete (built on first use: imports Mangum)."""
    if _CYCLE:
        return _CYCLE[0]
    from mangum.protocols.http import HTTPCycle, HTTPCycleState

    complete = HTTPCycleState.COMPLETE
    start = HTTPCycleState.REQUEST

    class Cycle(HTTPCycle):
        """One request's ASGI ``http`` cycle.

        ``sent`` is set when the final ``http.response.body`` has been taken (or the app ended
        without one: the end of `run`, so no done callback per request); ``failure`` is what the
        app raised before that (and whether the toolkit cut it at ``cancel_after_s``); what it
        raises after that is reported, not raised. ``timer`` is the cut's timer (the adapter
        starts it with the run, `cut` its callback), cancelled once the answer is complete.
        """

        def __init__(self, scope: Scope, body: bytes, sent: asyncio.Future[None],
                     cancel_after_s: float | None, on_failure: BackgroundFailure) -> None:
            super().__init__(scope, body)
            self.sent = sent
            self.cancel_after_s = cancel_after_s
            self.on_failure = on_failure
            self.failure: tuple[BaseException, bool] | None = None
            #: the exception being handled when the response completed (Starlette answers a
            #: route's exception, or an HTTPException, inside its ``except`` block): that
            #: answer is the app's failure, not work after the response
            self.answering: BaseException | None = None
            self.timer: asyncio.TimerHandle | None = None
            self.was_cut = False

        def cut(self, task: asyncio.Task[None]) -> None:
            """The timer's callback: the route ran past ``cancel_after_s``; cancel its run."""
            self.was_cut = True
            task.cancel()

        def report(self, error: BaseException) -> None:
            try:
                self.on_failure(error, self.scope)
            except Exception:  # noqa: BLE001 - a report never breaks the loop
                _log_background_failure(error, self.scope)

        async def send(self, message: Any) -> None:
            await super().send(message)
            if self.state is complete and not self.sent.done():
                timer = self.timer
                if timer is not None:  # the answer is complete: its budget is met
                    timer.cancel()
                    self.timer = None
                self.answering = sys.exc_info()[1]
                self.sent.set_result(None)

        async def run(self, app: Any) -> None:
            try:
                await app(self.scope, self.receive, self.send)
            except asyncio.CancelledError as exc:
                if self.state is complete:
                    raise  # cut at the invocation's deadline after the response: reported there
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
                if self.was_cut:
                    error: BaseException = TimeoutError(
                        f"the route ran past its budget ({(self.cancel_after_s or 0.0) * 1000:.0f} "
                        "ms) and was cancelled")
                    self.failure = (error, True)
                else:  # cancelled by the app itself: a failure of the app
                    self.failure = (exc, False)
                await self._answer_500()
            except Exception as exc:
                if self.state is complete and exc is not self.answering:  # raised after the
                    self.report(exc)  # response (a background task): the answer stands
                    return
                self.failure = (exc, False)
                self.logger.exception("An error occurred running the application.")
                await self._answer_500()
            finally:
                if self.timer is not None:
                    self.timer.cancel()
                    self.timer = None
                if not self.sent.done():  # the app ended without a complete answer
                    self.sent.set_result(None)

        async def _answer_500(self) -> None:
            """What Mangum answers for an app that raised (``500 text/plain``)."""
            if self.state is start:
                await self.send({"type": "http.response.start", "status": 500,
                                 "headers": [[b"content-type", b"text/plain; charset=utf-8"]]})
                await self.send({"type": "http.response.body", "body": b"Internal Server Error",
                                 "more_body": False})
            elif self.state is not complete:
                self.status = 500
                self.body = b"Internal Server Error"
                self.headers = [[b"content-type", b"text/plain; charset=utf-8"]]

    _CYCLE.append(Cycle)
    return Cycle


def _scope_once_handlers() -> list[type]:
    """Mangum's own event handlers, each building its ASGI scope once per request.

    Mangum 0.22's handlers compute ``scope`` as a property, and their ``__call__`` (the response)
    reads ``self.scope["aws.event"]`` again: every request builds the scope twice (headers
    lowered and encoded, query string, path). Same classes, same scope, built once
    (`_ScopeOnce`).
    """
    from mangum.handlers import ALB, APIGateway, HTTPGateway, LambdaAtEdge

    handlers: list[type] = []
    for cls in (ALB, HTTPGateway, APIGateway, LambdaAtEdge):
        scope: Any = vars(cls)["scope"]  # the property each handler class defines
        handlers.append(type(cls.__name__, (cls,), {"scope": _ScopeOnce(scope.fget)}))
    return handlers


class _ScopeOnce:
    """A handler's ``scope``, built on first read and kept in the instance (which then shadows
    this non-data descriptor): `functools.cached_property` without its per-read lock (Python
    3.11's takes an ``RLock`` on every first read; a handler serves one request on one thread).
    """

    def __init__(self, build: Callable[[Any], Any]) -> None:
        self.build = build

    def __get__(self, handler: Any, owner: type | None = None) -> Any:
        if handler is None:
            return self
        scope = handler.__dict__["scope"] = self.build(handler)
        return scope


def make_adapter(
    app: ASGIApp,
    *,
    base_path: str | None = None,
    strip_prefixes: Iterable[str] = (),
    text_mime_types: Iterable[str] = DEFAULT_TEXT_MIME_TYPES,
    exclude_headers: Iterable[str] = (),
    relative_redirects: bool = True,
    loop: AppLoop | None = None,
    runtime: Any = None,
) -> Adapter:
    """A Lambda handler for ``app`` behind Mangum (call it in the web stage: imports Mangum).

    Parameters
    ----------
    app : ASGIApp
        The ASGI app (FastAPI, Starlette, ...), routing on its own paths.
    base_path : str | None
        The agent's external prefix (``WARMSTART_BASE_PATH``, e.g. ``/lookup``); None for the
        root agent. Removed at a ``/`` boundary only.
    strip_prefixes : Iterable[str]
        Further prefixes (a custom domain's mapping key the event does not reveal).
    text_mime_types : Iterable[str]
        Media types answered as text (see :data:`DEFAULT_TEXT_MIME_TYPES` for the forms); pass
        ``(*DEFAULT_TEXT_MIME_TYPES, "application/x-ndjson")`` to add one.
    exclude_headers : Iterable[str]
        Response headers to drop (Mangum's option).
    relative_redirects : bool
        Make ``Location`` headers that point at the request's own host relative.
    loop : AppLoop | None
        The execution environment's event loop (None: a loop of the adapter's own).
    runtime : Any
        The agent's `functions.runtime.agent_runtime.AgentRuntime`, put in every request's
        scope as ``warmstart.runtime`` (None: not put).

    Returns
    -------
    Adapter

    Raises
    ------
    ValueError
        An unusable prefix or text MIME type pattern.

    Example
    -------
    >>> adapter = make_adapter(create_app(), base_path="/lookup")  # doctest: +SKIP
    >>> request = parse_http_event(event, base_path="/lookup")  # doctest: +SKIP
    >>> adapter(event, context, request=request)  # doctest: +SKIP
    """
    return Adapter(
        app,
        base_path=base_path,
        strip_prefixes=strip_prefixes,
        text_mime_types=text_mime_types,
        exclude_headers=exclude_headers,
        relative_redirects=relative_redirects,
        loop=loop,
        runtime=runtime,
    )
