"""The spec-controller daemon (`spec-controller run`): engine adapters, ingest, the control loop's
service, persistence jobs and the control API. Never imports controller.plugin (that runs inside
SGLang); what it shares with the plugin is controller.contract."""
