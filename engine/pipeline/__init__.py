"""The candidate pipeline, one typed stage per module, that `trace verify`, `trace decide`,
`trace bundle`, `trace fork` and `trace draft` compose:

    load (engine.pipeline.load: the candidate, its fork and state directory)
    -> build, fresh or cached (engine.pipeline.build: run the verify graph, or answer it from the
       index; checked against the store; judged) -> `Built`
    -> route (engine.pipeline.route) -> decide (engine.pipeline.decide) -> `Decided`
    -> bundle (engine.pipeline.bundle: the payload entries and the assembled statement)
    -> sign (engine.pipeline.sign: key or keyless, under the signer lock)

`engine.pipeline.verify_fresh` is `trace verify` (load -> build fresh) as a library. The stages
sit below the applications (engine.audit, engine.fork, engine.agent) and above what they call (the
verify graph and verdict in engine.verify, the policies, the evidence records, the model roles).
"""
