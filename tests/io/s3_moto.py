#!/usr/bin/env python3
"""An S3 server for the tests: moto on a free loopback port, checking SigV4 signatures.

  s3_moto.py BUCKET DIR [PREFIX]

uploads every file under DIR to s3://BUCKET/PREFIX/<relative path> (unsigned, before
authentication starts), creates an IAM user with a key pair and a role whose assumed session
gives a key pair with a session token, then turns authentication on for every later request and
prints one JSON line: port, the user's key and secret, the session's key, secret and token.
It serves until its standard input closes (the test ending, or dying), then stops.
Exit status 77 (skip) when moto or boto3 is missing.
"""
import json
import logging
import os
import socket
import sys
import urllib.request

try:
    import boto3
    from moto.server import ThreadedMotoServer
except ImportError as e:  # the test skips, saying why
    print(json.dumps({"skip": f"moto/boto3 not importable: {e}"}), flush=True)
    sys.exit(77)


def requote_signed_query():
    """moto 5.2 checks a signature against the request's query after decoding it, so a query
    value with an encoded reserved character (ListObjectsV2's prefix=a%2Fb, as boto3 itself and
    AWS send it) never matches, and boto3's own list_objects_v2(Prefix="a/") fails against it.
    Re-encode each value as SigV4 says (RFC 3986, only A-Z a-z 0-9 - _ . ~ left bare) before
    moto recomputes the signature. Only the test server is patched."""
    from urllib.parse import quote, unquote
    from moto.iam.access_control import IAMRequestBase
    make = IAMRequestBase._create_aws_request

    def create(self):
        path, sep, query = self._path.partition("?")
        if sep:
            parts = []
            for kv in query.split("&"):
                k, eq, v = kv.partition("=")
                parts.append(quote(unquote(k), safe="-_.~") + eq + quote(unquote(v), safe="-_.~"))
            self._path = path + "?" + "&".join(parts)
        return make(self)
    IAMRequestBase._create_aws_request = create

ALLOW_ALL = json.dumps({"Version": "2012-10-17",
                        "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]})
TRUST = json.dumps({"Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"},
                                   "Action": "sts:AssumeRole"}]})


def main():
    bucket, root = sys.argv[1], sys.argv[2]
    prefix = sys.argv[3].strip("/") + "/" if len(sys.argv) > 3 and sys.argv[3] else ""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    requote_signed_query()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    kw = dict(endpoint_url=url, region_name="us-east-1",
              aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="setup")
    iam, sts, s3 = (boto3.client(n, **kw) for n in ("iam", "sts", "s3"))
    iam.create_user(UserName="reader")
    iam.put_user_policy(UserName="reader", PolicyName="all", PolicyDocument=ALLOW_ALL)
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    role = iam.create_role(RoleName="trainer", AssumeRolePolicyDocument=TRUST)["Role"]
    iam.put_role_policy(RoleName="trainer", PolicyName="all", PolicyDocument=ALLOW_ALL)
    sess = sts.assume_role(RoleArn=role["Arn"], RoleSessionName="trainer-session")["Credentials"]
    s3.create_bucket(Bucket=bucket)
    for d, _, files in os.walk(root):
        for f in sorted(files):
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                s3.put_object(Bucket=bucket, Key=prefix + os.path.relpath(p, root), Body=fh.read())
    # From here on every request must be signed by a known key (0 more unauthenticated ones).
    req = urllib.request.Request(url + "/moto-api/reset-auth", data=b"0", method="POST",
                                 headers={"Content-Type": "text/plain"})
    urllib.request.urlopen(req).read()
    print(json.dumps({"port": port, "key": key["AccessKeyId"], "secret": key["SecretAccessKey"],
                      "session_key": sess["AccessKeyId"], "session_secret": sess["SecretAccessKey"],
                      "session_token": sess["SessionToken"]}), flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    main()
