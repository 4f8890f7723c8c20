#!/usr/bin/env python3
"""Prepares and inspects a running moto S3 server for the tests (boto3, which moto brings).

  moto_admin.py ENDPOINT make-key                 IAM user with an allow-all policy; prints "KEY id secret"
  moto_admin.py ENDPOINT make-role NAME           IAM role with an allow-all policy; prints "ROLE arn"
  moto_admin.py ENDPOINT make-reader              IAM user allowed s3:GetObject only (no listing);
                                                  prints "KEY id secret"
  moto_admin.py ENDPOINT create-bucket BUCKET
  moto_admin.py ENDPOINT put BUCKET KEY FILE
  moto_admin.py ENDPOINT get BUCKET KEY FILE      writes the object to FILE
  moto_admin.py ENDPOINT exists BUCKET KEY        prints yes or no
  moto_admin.py ENDPOINT uploads BUCKET           prints the number of unfinished multipart uploads
  moto_admin.py ENDPOINT enable-auth              from now on moto checks every signature
"""
import json
import sys
import urllib.request

import boto3
import botocore


def client(endpoint, service="s3", key=("testing", "testing")):
    return boto3.client(service, endpoint_url=endpoint, region_name="us-east-1",
                        aws_access_key_id=key[0], aws_secret_access_key=key[1],
                        config=botocore.config.Config(s3={"addressing_style": "path"}))


def main(argv):
    endpoint, cmd, args = argv[1], argv[2], argv[3:]
    s3 = client(endpoint)
    if cmd in ("make-key", "make-reader"):
        iam = client(endpoint, "iam")
        user = "ferry" if cmd == "make-key" else "reader"
        action = "*" if cmd == "make-key" else "s3:GetObject"
        iam.create_user(UserName=user)
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": action, "Resource": "*"}]}
        iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=json.dumps(policy))
        k = iam.create_access_key(UserName=user)["AccessKey"]
        print("KEY", k["AccessKeyId"], k["SecretAccessKey"])
    elif cmd == "make-role":
        iam = client(endpoint, "iam")
        trust = {"Version": "2012-10-17",
                 "Statement": [{"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}]}
        arn = iam.create_role(RoleName=args[0], AssumeRolePolicyDocument=json.dumps(trust))["Role"]["Arn"]
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_role_policy(RoleName=args[0], PolicyName="all", PolicyDocument=json.dumps(policy))
        print("ROLE", arn)
    elif cmd == "create-bucket":
        s3.create_bucket(Bucket=args[0])
    elif cmd == "put":
        with open(args[2], "rb") as f:
            s3.put_object(Bucket=args[0], Key=args[1], Body=f.read())
    elif cmd == "get":
        body = s3.get_object(Bucket=args[0], Key=args[1])["Body"].read()
        with open(args[2], "wb") as f:
            f.write(body)
    elif cmd == "exists":
        try:
            s3.head_object(Bucket=args[0], Key=args[1])
            print("yes")
        except botocore.exceptions.ClientError:
            print("no")
    elif cmd == "uploads":
        r = s3.list_multipart_uploads(Bucket=args[0])
        print(len(r.get("Uploads", [])))
    elif cmd == "enable-auth":
        req = urllib.request.Request(endpoint + "/moto-api/reset-auth", data=b"0", method="POST",
                                     headers={"Content-Type": "application/octet-stream"})
        urllib.request.urlopen(req, timeout=10).read()
    else:
        print("unknown command", cmd, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
