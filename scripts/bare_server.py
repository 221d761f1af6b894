"""Baseline for `make bench`: a bare MCPServer with one tool, served over stdio."""

from mcp.server.mcpserver import MCPServer

mcp = MCPServer(name="bare")


@mcp.tool()
def ping() -> str:
    """Answer pong."""
    return "pong"


if __name__ == "__main__":
    mcp.run("stdio")
