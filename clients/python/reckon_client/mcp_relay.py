"""Everything of MCP but ``tools/call``, relayed unchanged between the host and the real server for
``reckon-mcp-proxy`` (docs/agents.md, "The MCP proxy").

Host to server: resources (list, templates, read, subscribe, unsubscribe), prompts (list, get) and
completion, each offered only when the server offers it, and the roots-changed notification.
Server to host: roots, sampling and elicitation requests, and every notification (logging,
progress, list changes, resource updates). Requests go with their params as received, the answers
come back as given; an error from either side is passed on with its code and message.

The host's session is known from its first request to the proxy; a server request that comes
before (the filesystem server asks for roots as soon as it is initialized) waits for it.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any


class Relay:
    """The two ends: ``host`` (the SDK's server session facing the agent, set by ``seen``) and
    ``upstream`` (the client session facing the real server, set once it is connected)."""

    def __init__(self):
        self.host: Any = None
        self.upstream: Any = None
        self.ready = asyncio.Event()
        self.tools_changed: Any = None  # awaited when the server says its tools changed

    def seen(self, ctx: Any) -> None:
        if self.host is None:
            self.host = ctx.session
            self.ready.set()

    # server -> host ----------------------------------------------------------------------------

    def client_callbacks(self) -> dict:
        """The upstream ``ClientSession``'s callbacks: each asks the host."""
        return {"list_roots_callback": self._roots, "sampling_callback": self._sampling, "elicitation_callback": self._elicitation, "message_handler": self._notification}

    async def _ask_host(self, request: Any, result_type: Any):
        import mcp_types
        from mcp.shared.exceptions import MCPError

        await self.ready.wait()
        try:
            return await self.host.send_request(request, result_type)
        except MCPError as exc:
            return mcp_types.ErrorData(code=exc.code, message=exc.message, data=exc.data)
        except Exception as exc:  # the host went away, or cannot answer: the server hears why
            return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message=f"reckon-mcp-proxy could not ask the host: {type(exc).__name__}: {exc}")

    async def _roots(self, context):
        import mcp_types

        return await self._ask_host(mcp_types.ListRootsRequest(), mcp_types.ListRootsResult)

    async def _sampling(self, context, params):
        import mcp_types

        return await self._ask_host(mcp_types.CreateMessageRequest(params=params), mcp_types.CreateMessageResult)

    async def _elicitation(self, context, params):
        import mcp_types

        return await self._ask_host(mcp_types.ElicitRequest(params=params), mcp_types.ElicitResult)

    async def _notification(self, message: Any) -> None:
        if isinstance(message, Exception) or self.host is None:
            return  # a transport error is the proxy's own business; before the host, nobody to tell
        import mcp_types

        if isinstance(message, mcp_types.ToolListChangedNotification) and self.tools_changed is not None:
            await self.tools_changed()
        await self.host.send_notification(message)

    # host -> server ----------------------------------------------------------------------------

    def server_handlers(self, capabilities: Any) -> dict:
        """The proxy's ``Server`` handlers for what the real server offers (its ``capabilities``)."""
        import mcp_types as t

        def relay(request_type, result_type):
            async def handler(ctx, params):
                self.seen(ctx)
                return await self.upstream.send_request(request_type(params=params), result_type)

            return handler

        out: dict[str, Any] = {}
        if capabilities is not None and capabilities.resources is not None:
            out["on_list_resources"] = relay(t.ListResourcesRequest, t.ListResourcesResult)
            out["on_list_resource_templates"] = relay(t.ListResourceTemplatesRequest, t.ListResourceTemplatesResult)
            out["on_read_resource"] = relay(t.ReadResourceRequest, t.ReadResourceResult)
            if capabilities.resources.subscribe:
                out["on_subscribe_resource"] = relay(t.SubscribeRequest, t.EmptyResult)
                out["on_unsubscribe_resource"] = relay(t.UnsubscribeRequest, t.EmptyResult)
        if capabilities is not None and capabilities.prompts is not None:
            out["on_list_prompts"] = relay(t.ListPromptsRequest, t.ListPromptsResult)
            out["on_get_prompt"] = relay(t.GetPromptRequest, t.GetPromptResult)
        if capabilities is not None and capabilities.completions is not None:
            out["on_completion"] = relay(t.CompleteRequest, t.CompleteResult)

        async def roots_changed(ctx, params):
            self.seen(ctx)
            await self.upstream.send_roots_list_changed()

        out["on_roots_list_changed"] = roots_changed
        return out

    @staticmethod
    def server(name: str, version: str, **handlers: Any):
        """The SDK's low-level ``Server`` with ``handlers``."""
        from mcp.server.lowlevel import Server
        from mcp.shared.exceptions import MCPDeprecationWarning

        with warnings.catch_warnings():
            # The SDK marks roots deprecated in the newest protocol version; servers still ask for
            # them (the filesystem server does), so the proxy relays the host's changes.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            return Server(name, version=version, **handlers)

    @staticmethod
    def notification_options(capabilities: Any):
        """Announce the list changes the real server announces: the proxy relays its notifications."""
        from mcp.server.lowlevel.server import NotificationOptions

        def changed(cap):
            return bool(cap is not None and getattr(cap, "list_changed", False))

        c = capabilities
        return NotificationOptions(
            prompts_changed=changed(c and c.prompts), resources_changed=changed(c and c.resources), tools_changed=changed(c and c.tools)
        )
