"""The MCP server ``refvault demo`` puts behind the gateway (one tool returning a dashboard screenshot, a PNG).

    python examples/incident_mcp_server.py        # serves over stdio; the same as the line below
    python -m refvault.demo.incident_mcp_server   # what the demo runs (installed with refvault[mcp])

The server lives in :mod:`refvault.demo.incident_mcp_server`; this file only runs it.
"""

from refvault.demo.incident_mcp_server import main

if __name__ == "__main__":
    main()
