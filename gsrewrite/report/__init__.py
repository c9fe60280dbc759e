"""The HTML report of a request (issue 34): what changed, where, why, and what it bought.

Data first: :mod:`gsrewrite.report.record` holds the serializable record; :mod:`gsrewrite.report.collect` takes
each rewritten region down as the engine replaces it (the one replace primitive's caller) and groups equal ones;
:mod:`gsrewrite.report.layout`, :mod:`gsrewrite.report.svg`, :mod:`gsrewrite.report.sections` and
:mod:`gsrewrite.report.html` render the record as one self-contained page (inline SVG, no script, no network).
The pipelines feed it (:mod:`gsrewrite.pipelines.reported`); nothing here imports them.
"""
