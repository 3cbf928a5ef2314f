"""The EKS bearer token botocore makes for fixed inputs: the reference for the Rust signer.

Same recipe as `aws eks get-token` (awscli/customizations/eks/get_token.py): a presigned STS
GetCallerIdentity GET URL, 60 s expiry, carrying the signed header x-k8s-aws-id, base64url'd
without padding behind "k8s-aws-v1.". Nothing leaves the machine: presigning is local.

botocore has two presigners: its own Python SigV4QueryAuth and, when awscrt is installed (as
aws-sam-cli installs it, and as the AWS CLI v2 ships), the CRT one, which it then prefers. SIGNER
picks one explicitly so that both are checked; they differ only in query parameter order.

Prints two lines: the token, then the URL inside it.

usage: eks_token.py python|crt ACCESS_KEY SECRET_KEY SESSION_TOKEN|- REGION CLUSTER UNIX_SECONDS
"""

import base64
import contextlib
import datetime
import importlib
import sys
from unittest import mock

import botocore.auth
import botocore.session
from botocore.config import Config

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
PRESIGN_EXPIRES = 60


def presigned_url(access_key, secret_key, session_token, region, cluster):
    session = botocore.session.Session()
    session.set_credentials(access_key, secret_key, session_token)
    # As `aws eks get-token`: EKS wants the regional STS endpoint, also in us-east-1.
    session.set_config_variable("sts_regional_endpoints", "regional")
    sts = session.create_client(
        "sts", region_name=region, config=Config(signature_version="v4")
    )

    # awscli moves the cluster name from the call's params into a header just before signing.
    def move_cluster_id(params, context, **_):
        if CLUSTER_ID_HEADER in params:
            context[CLUSTER_ID_HEADER] = params.pop(CLUSTER_ID_HEADER)

    def add_cluster_header(request, **_):
        request.headers[CLUSTER_ID_HEADER] = request.context[CLUSTER_ID_HEADER]

    events = sts.meta.events
    events.register("provide-client-params.sts.GetCallerIdentity", move_cluster_id)
    events.register("before-sign.sts.GetCallerIdentity", add_cluster_header)
    return sts.generate_presigned_url(
        "get_caller_identity",
        Params={CLUSTER_ID_HEADER: cluster},
        ExpiresIn=PRESIGN_EXPIRES,
        HttpMethod="GET",
    )


def query_signer(name):
    if name == "python":
        return botocore.auth.SigV4QueryAuth
    if name == "crt":
        # Fails loudly when awscrt is missing.
        return importlib.import_module("botocore.crt.auth").CrtSigV4QueryAuth
    sys.exit(f"unknown signer {name!r}\n{__doc__}")


def fixed_clock(unix_seconds):
    fixed = datetime.datetime.fromtimestamp(unix_seconds, datetime.timezone.utc)

    def now(remove_tzinfo=True):
        return fixed.replace(tzinfo=None) if remove_tzinfo else fixed

    return now


def main(argv):
    if len(argv) != 8:
        sys.exit(__doc__)
    signer, access_key, secret_key, session_token, region, cluster, unix_seconds = argv[1:]
    signer_class = query_signer(signer)
    clock = fixed_clock(int(unix_seconds))
    patches = [
        mock.patch.dict(botocore.auth.AUTH_TYPE_MAPS, {"v4-query": signer_class}),
        mock.patch.object(botocore.auth, "get_current_datetime", clock),
    ]
    if signer == "crt":
        crt_auth = importlib.import_module("botocore.crt.auth")
        patches.append(mock.patch.object(crt_auth, "get_current_datetime", clock))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        url = presigned_url(
            access_key,
            secret_key,
            None if session_token == "-" else session_token,
            region,
            cluster,
        )
    encoded = base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")
    print(TOKEN_PREFIX + encoded)
    print(url)


if __name__ == "__main__":
    main(sys.argv)
