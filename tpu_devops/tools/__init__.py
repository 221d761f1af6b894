"""The toolsets: one file per area, each its area's table of contents.

Each file declares its `tpu_devops.host.toolsets.Toolset` and its tools, thin bodies that call the domain
(imported on first use: the annotations name ``tpu_devops.<package>.<module>.<Type>``, which loads when the
tool is built). Shared arguments and parameter groups are declared once in `tpu_devops.tools.args`.
`server.py` lists the toolsets and builds the server from the ones the operator enabled.
"""

from tpu_devops import lazy_submodules

__getattr__ = lazy_submodules(__name__)
