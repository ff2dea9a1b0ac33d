"""``engram-hooks``: Claude Code lifecycle hooks that build an Engram memory without the agent
calling a tool.

Claude Code runs the command for each configured event with the event's JSON on stdin (fields
``session_id``, ``transcript_path``, ``cwd``, ``hook_event_name`` and the event's own). What each
event does:

==========================  ======================================================================
``SessionStart``            prints the memories to start from as ``additionalContext`` (the
                            user's identity and standing instructions, then this project's
                            memories), found by search
``UserPromptSubmit``        recalls the memories relevant to the prompt, as ``additionalContext``
``PostToolUse``             captures the tool call as an observation (privacy filter, dedup window
                            and extraction on the server; quiet tools such as Read are skipped)
``PostToolUseFailure``      the same for a failed call (its ``error``)
``Stop``, ``PreCompact``    extracts the facts of the conversation so far from the transcript and
                            writes or updates the session summary
``SessionEnd``              the same, once more, at the end
==========================  ======================================================================

It never blocks or breaks the agent: every event is bounded by a timeout
(``ENGRAM_HOOKS_TIMEOUT``, default 8 s, below Claude Code's own), and any failure — the server
down, a bad payload, the timeout — prints one warning line on stderr and exits 0. It depends on
engram-client only.
"""

from engram_hooks.core import HookSettings, handle, main

__all__ = ["HookSettings", "handle", "main"]
