"""gsrewrite-example: a third-party gsrewrite plugin for the custom op ``example.com::MyRelu``.

``MyRelu(X) -> Y`` is an elementwise ReLU in the ``example.com`` domain. The plugin (module
:mod:`gsrewrite_example.plugin`) teaches gsrewrite its output shape, its cost, and adds the
``gsrewrite example-hello MODEL`` command.
"""

__version__ = "0.1.0"

#: The custom op this plugin knows.
DOMAIN = "example.com"
OP_TYPE = "MyRelu"
