"""HTML pages for reviewers: a bundle's report, a fork's findings, a pipeline's step graph.

Modules: `load` (a bundle's files as links with their digest status, beside the verdict of
engine.audit), `verdict` (the first screen: decision, deny reasons, integrity in three
states), `proven` (what was proven, a sentence each), `view` (the claim stack in audit order,
each link's state), `sections` (each link's data), `stacks` (full stacks from the run records,
patched frames marked), `records` (defensive JSON reads), `diff` (patch rows with coverage
marks), `layout` (step graph coordinates by topological generation), `render` (the one jinja2
environment: autoescape, a Content Security Policy without network), `page` (`trace report`),
`findings` (`trace fork --report`), `graph` (`trace graph --format svg|html`); the command
line is engine/cli/report.py.
Templates, CSS and the inline scripts live in templates/report/.
"""
