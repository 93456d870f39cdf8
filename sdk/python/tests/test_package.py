"""The package's shape, read from its installed source: its modules
import one another without a cycle, and only _wire.py, which reads and
writes the wire's JSON, knows the wire's camelCase names."""

import ast
import os
import re
import unittest

import toolgate

PACKAGE = os.path.dirname(toolgate.__file__)

# A string that is a camelCase name (pendingId, approvedOrRejectedByUserId).
CAMEL = re.compile(r"^[a-z]+(?:[A-Z][a-z0-9]*)+$")


def modules():
    """Each module of the package (by its name in it, "client") and its
    syntax tree."""
    for name in sorted(os.listdir(PACKAGE)):
        if name.endswith(".py"):
            with open(os.path.join(PACKAGE, name), encoding="utf-8") as f:
                yield name[:-3], ast.parse(f.read(), name)


def imports(tree):
    """The package's modules a module imports, anywhere in it."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module)
            else:
                out.update(a.name for a in node.names)
    return out


class PackageTest(unittest.TestCase):
    def test_modules_import_one_another_without_a_cycle(self):
        graph = {name: imports(tree) for name, tree in modules()}
        self.assertIn("errors", graph["client"], "the graph holds the imports")
        done, path = set(), []

        def visit(name):
            if name in path:
                self.fail("import cycle: " + " -> ".join(path[path.index(name):] + [name]))
            if name in done:
                return
            path.append(name)
            for dep in sorted(graph.get(name, ())):
                visit(dep)
            path.pop()
            done.add(name)

        for name in graph:
            visit(name)

    def test_only_wire_knows_the_wires_names(self):
        for name, tree in modules():
            if name == "_wire":
                continue
            docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                          if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                          and isinstance(n.body[0], ast.Expr)}
            camel = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                     and id(n) not in docstrings and CAMEL.match(n.value)]
            self.assertEqual([], camel, "%s.py names fields as the wire does" % name)


if __name__ == "__main__":
    unittest.main()
