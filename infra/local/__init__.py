"""The local deployment: Lambda emulator, HTTP API gateway, moto server, `warmstart local up`.

Modules (import what you use; this package imports nothing):

- ``spec``       frozen descriptions of functions, aliases and the gateway route
- ``template``   reads them from a synthesized CloudFormation/CDK template
- ``emulator``   execution environments as processes, each with its own Lambda Runtime API and
                 Extensions API; scaling, provisioned concurrency, SnapStart; invocation
                 listeners (``Emulator.add_listener``); a package, one module per seam
- ``bootstrap``  a stdlib Runtime API client (the SnapStart template's runtime; environments
                 run AWS's ``awslambdaric`` by default)
- ``api``        the Lambda REST API for boto3 with ``endpoint_url``
- ``gateway``    HTTP -> API Gateway payload 2.0 events -> alias ``live`` -> HTTP
- ``metrics``    AWS/Lambda metrics to CloudWatch (moto)
- ``stack``      ``LocalStack``: the managed services started and stopped together
- ``services``   the GPU endpoint server and the warmer schedule as stack services
- ``clock``      real and scaled clocks (time scaling for replays)
"""
