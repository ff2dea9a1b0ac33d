"""engram-mcp: an MCP server whose tools forward to an Engram server over gRPC (engram-client)."""

from engram_mcp.server import INSTRUCTIONS, READ_TOOLS, WRITE_TOOLS, EngramMcp
from engram_mcp.settings import ShimSettings

__version__ = "0.1.0a1"

__all__ = ["INSTRUCTIONS", "READ_TOOLS", "WRITE_TOOLS", "EngramMcp", "ShimSettings", "__version__"]
