#!/usr/bin/python3
"""Checks an S3 endpoint with an independent SigV4 client (boto3/botocore).

Run it against the test server:

    tests/tools/with-s3.sh tests/tools/s3-server-selftest.py

It reads TESSERA_TEST_S3_ENDPOINT, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
AWS_REGION, works in a fresh bucket that it deletes at the end, prints one
line per check (what the server answered, so the output documents the
server's behaviour) and exits 1 if any check failed.

Needs the Debian python3-boto3 package; the shebang is /usr/bin/python3 on
purpose, so a pyenv or venv python3 earlier in PATH does not hide it.
"""

import datetime
import hashlib
import http.client
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from unittest import mock

import boto3
import botocore.auth
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

ENDPOINT = os.environ['TESSERA_TEST_S3_ENDPOINT']
ACCESS_KEY = os.environ['AWS_ACCESS_KEY_ID']
SECRET_KEY = os.environ['AWS_SECRET_ACCESS_KEY']
REGION = os.environ.get('AWS_REGION', 'us-east-1')
HOST, PORT = urllib.parse.urlsplit(ENDPOINT).hostname, urllib.parse.urlsplit(ENDPOINT).port
BUCKET = 'tessera-selftest-' + uuid.uuid4().hex[:12]
DATA = b'0123456789abcdefghij'  # 20 bytes

failures = []


def check(name, ok, detail=''):
    print('%s %s%s' % ('ok  ' if ok else 'FAIL', name, ' -> ' + detail if detail else ''))
    if not ok:
        failures.append(name)


def client(secret=SECRET_KEY, addressing='path'):
    return boto3.client(
        's3', endpoint_url=ENDPOINT, region_name=REGION,
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=secret,
        config=Config(signature_version='s3v4', s3={'addressing_style': addressing},
                      retries={'max_attempts': 1}))


def error_of(call):
    """Runs CALL, returns (HTTP status, S3 error code); (status, None) on success."""
    try:
        response = call()
        return response['ResponseMetadata']['HTTPStatusCode'], None
    except ClientError as e:
        return e.response['ResponseMetadata']['HTTPStatusCode'], e.response['Error']['Code']


def signed(method, path, body=b'', host=None, payload_hash='auto', region=REGION,
           secret=SECRET_KEY, headers=None):
    """Sends one SigV4-signed request over plain http.client to 127.0.0.1:PORT
    with the given Host header; returns (status, headers, body)."""
    host = host or '%s:%d' % (HOST, PORT)
    request = AWSRequest(method=method, url='http://%s%s' % (host, path), data=body,
                         headers=dict(headers or {}))
    request.headers['Host'] = host
    if payload_hash == 'auto':
        payload_hash = hashlib.sha256(body).hexdigest()
    if payload_hash is not None:
        request.headers['x-amz-content-sha256'] = payload_hash
    SigV4Auth(Credentials(ACCESS_KEY, secret), 's3', region).add_auth(request)
    connection = http.client.HTTPConnection(HOST, PORT, timeout=30)
    try:
        connection.request(method, path, body=body, headers=dict(request.headers.items()))
        response = connection.getresponse()
        return response.status, response, response.read()
    finally:
        connection.close()


def s3_code(body):
    """The <Code> of an S3 XML error body, or ''."""
    text = body.decode('utf-8', 'replace')
    start = text.find('<Code>')
    return text[start + 6:text.find('</Code>')] if start >= 0 else ''


def test_objects(s3):
    status, code = error_of(lambda: s3.create_bucket(Bucket=BUCKET))
    check('create bucket (path-style)', status == 200, 'HTTP %s' % status)
    status, code = error_of(lambda: s3.create_bucket(Bucket=BUCKET))
    check('create existing bucket', status == 409 and code == 'BucketAlreadyOwnedByYou',
          'HTTP %s %s' % (status, code))
    status, code = error_of(lambda: s3.head_bucket(Bucket=BUCKET))
    check('HEAD bucket', status == 200, 'HTTP %s' % status)

    put = s3.put_object(Bucket=BUCKET, Key='obj', Body=DATA)
    md5 = '"%s"' % hashlib.md5(DATA).hexdigest()
    check('PUT object', put['ETag'] == md5, 'ETag %s' % put['ETag'])
    got = s3.get_object(Bucket=BUCKET, Key='obj')
    body = got['Body'].read()
    check('GET object', body == DATA and got['ETag'] == md5,
          '%d bytes, ETag %s' % (len(body), got['ETag']))

    for spec, first, last in (('bytes=0-9', 0, 9), ('bytes=5-', 5, 19), ('bytes=-3', 17, 19),
                              ('bytes=-30', 0, 19), ('bytes=15-100', 15, 19)):
        r = s3.get_object(Bucket=BUCKET, Key='obj', Range=spec)
        status = r['ResponseMetadata']['HTTPStatusCode']
        body = r['Body'].read()
        expect = 'bytes %d-%d/%d' % (first, last, len(DATA))
        check('ranged GET %s' % spec,
              status == 206 and r.get('ContentRange') == expect and body == DATA[first:last + 1],
              'HTTP %s, Content-Range: %s, Content-Length: %s, body %r'
              % (status, r.get('ContentRange'), r['ContentLength'], body))
    status, code = error_of(lambda: s3.get_object(Bucket=BUCKET, Key='obj', Range='bytes=20-30'))
    check('ranged GET past the end (bytes=20-30)', status == 416 and code == 'InvalidRange',
          'HTTP %s %s' % (status, code))

    head = s3.head_object(Bucket=BUCKET, Key='obj')
    check('HEAD object', head['ContentLength'] == len(DATA) and head['ETag'] == md5,
          'Content-Length %s, ETag %s' % (head['ContentLength'], head['ETag']))
    status, code = error_of(lambda: s3.get_object(Bucket=BUCKET, Key='obj', IfNoneMatch=md5))
    check('GET If-None-Match current ETag', status == 304, 'HTTP %s' % status)

    odd_key = 'dir/a b+c%d=e&f?g~ü'
    s3.put_object(Bucket=BUCKET, Key=odd_key, Body=b'odd')
    body = s3.get_object(Bucket=BUCKET, Key=odd_key)['Body'].read()
    check('key with space, +, %, =, &, ?, ~, non-ASCII', body == b'odd', repr(body))
    s3.delete_object(Bucket=BUCKET, Key=odd_key)

    status, code = error_of(lambda: s3.delete_object(Bucket=BUCKET, Key='obj'))
    check('DELETE object', status == 204, 'HTTP %s' % status)
    status, code = error_of(lambda: s3.get_object(Bucket=BUCKET, Key='obj'))
    check('GET deleted object', status == 404 and code == 'NoSuchKey', 'HTTP %s %s' % (status, code))
    status, code = error_of(lambda: s3.head_object(Bucket=BUCKET, Key='obj'))
    check('HEAD deleted object', status == 404, 'HTTP %s (HEAD has no body, so no code)' % status)
    status, code = error_of(lambda: s3.delete_object(Bucket=BUCKET, Key='obj'))
    check('DELETE missing object', status == 204, 'HTTP %s' % status)

    missing = BUCKET + '-missing'
    for name, call in (('GET', lambda: s3.get_object(Bucket=missing, Key='k')),
                       ('PUT', lambda: s3.put_object(Bucket=missing, Key='k', Body=b'1')),
                       ('ListObjectsV2', lambda: s3.list_objects_v2(Bucket=missing))):
        status, code = error_of(call)
        check('%s in missing bucket' % name, status == 404 and code == 'NoSuchBucket',
              'HTTP %s %s' % (status, code))
    status, code = error_of(lambda: s3.head_bucket(Bucket=missing))
    check('HEAD missing bucket', status == 404, 'HTTP %s' % status)


def test_listing(s3):
    keys = ['list/k%d' % i for i in range(5)]
    for key in keys + ['listx', 'other/x']:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b'x')

    def pages(**kwargs):
        """Lists with MaxKeys=2, following NextContinuationToken; returns the
        keys per page and the tokens seen."""
        result, tokens, token = [], [], None
        while True:
            args = dict(kwargs, Bucket=BUCKET, MaxKeys=2)
            if token:
                args['ContinuationToken'] = token
            r = s3.list_objects_v2(**args)
            page = [o['Key'] for o in r.get('Contents', [])]
            result.append(page)
            ok = r['KeyCount'] == len(page) and r['IsTruncated'] == ('NextContinuationToken' in r)
            if not ok or len(result) > 10:
                return result, tokens, False
            token = r.get('NextContinuationToken')
            if not token:
                return result, tokens, True
            tokens.append(token)

    result, tokens, ok = pages(Prefix='list/')
    check('ListObjectsV2 Prefix=list/ MaxKeys=2, ContinuationToken paging',
          ok and result == [keys[0:2], keys[2:4], keys[4:5]],
          'pages %s, tokens %s' % (result, tokens))
    result, tokens, ok = pages()
    expect = [keys[0:2], keys[2:4], [keys[4], 'listx'], ['other/x']]
    check('ListObjectsV2 no prefix MaxKeys=2 paging', ok and result == expect,
          'pages %s' % result)

    r = s3.list_objects_v2(Bucket=BUCKET, Prefix='list/', StartAfter='list/k2')
    got = [o['Key'] for o in r.get('Contents', [])]
    check('ListObjectsV2 Prefix=list/ StartAfter=list/k2', got == keys[3:],
          '%s, StartAfter echoed: %s' % (got, r.get('StartAfter')))
    r = s3.list_objects_v2(Bucket=BUCKET, Delimiter='/')
    got = ([o['Key'] for o in r.get('Contents', [])],
           [p['Prefix'] for p in r.get('CommonPrefixes', [])])
    check('ListObjectsV2 Delimiter=/', got == (['listx'], ['list/', 'other/']),
          'keys %s, prefixes %s, KeyCount %s' % (got[0], got[1], r['KeyCount']))
    r = s3.list_objects_v2(Bucket=BUCKET, Prefix='nothing/')
    check('ListObjectsV2 empty result', r['KeyCount'] == 0 and 'Contents' not in r
          and not r['IsTruncated'], 'KeyCount %s' % r['KeyCount'])

    status, code = error_of(lambda: s3.delete_bucket(Bucket=BUCKET))
    check('DELETE non-empty bucket', status == 409 and code == 'BucketNotEmpty',
          'HTTP %s %s' % (status, code))
    for key in keys + ['listx', 'other/x']:
        s3.delete_object(Bucket=BUCKET, Key=key)


def test_multipart(s3):
    def upload(sizes):
        mpu = s3.create_multipart_upload(Bucket=BUCKET, Key='mp')
        parts = []
        for number, size in enumerate(sizes, 1):
            part = s3.upload_part(Bucket=BUCKET, Key='mp', UploadId=mpu['UploadId'],
                                  PartNumber=number, Body=b'm' * size)
            parts.append({'PartNumber': number, 'ETag': part['ETag']})
        return error_of(lambda: s3.complete_multipart_upload(
            Bucket=BUCKET, Key='mp', UploadId=mpu['UploadId'],
            MultipartUpload={'Parts': parts})), mpu['UploadId']

    (status, code), upload_id = upload([100, 100])
    check('multipart with a part < 5 MiB', status == 400 and code == 'EntityTooSmall',
          'HTTP %s %s' % (status, code))
    s3.abort_multipart_upload(Bucket=BUCKET, Key='mp', UploadId=upload_id)
    (status, code), _ = upload([5 << 20, 100])
    head = s3.head_object(Bucket=BUCKET, Key='mp') if status == 200 else {}
    check('multipart 5 MiB + 100 B', status == 200 and head.get('ContentLength') == (5 << 20) + 100
          and head.get('ETag', '').endswith('-2"'),
          'HTTP %s, size %s, ETag %s' % (status, head.get('ContentLength'), head.get('ETag')))
    s3.delete_object(Bucket=BUCKET, Key='mp')


def test_signatures(s3):
    bad = client(secret=SECRET_KEY + 'x')
    status, code = error_of(lambda: bad.list_objects_v2(Bucket=BUCKET))
    check('wrong secret: ListObjectsV2', status == 403 and code == 'SignatureDoesNotMatch',
          'HTTP %s %s' % (status, code))
    status, code = error_of(lambda: bad.put_object(Bucket=BUCKET, Key='forged', Body=b'1'))
    check('wrong secret: PUT', status == 403 and code == 'SignatureDoesNotMatch',
          'HTTP %s %s' % (status, code))
    status, code = error_of(lambda: s3.head_object(Bucket=BUCKET, Key='forged'))
    check('wrong secret: PUT stored nothing', status == 404, 'HEAD -> HTTP %s' % status)

    path = '/%s/sig' % BUCKET
    status, _, body = signed('PUT', path, b'abc', payload_hash='UNSIGNED-PAYLOAD')
    check('x-amz-content-sha256: UNSIGNED-PAYLOAD accepted', status == 200, 'HTTP %s' % status)
    status, _, body = signed('PUT', path, b'abc', payload_hash=hashlib.sha256(b'abd').hexdigest())
    check('payload not matching x-amz-content-sha256 rejected', status == 400,
          'HTTP %s %s' % (status, s3_code(body)))
    status, _, body = signed('PUT', path, b'abc', payload_hash=None)
    check('missing x-amz-content-sha256 rejected', status == 400,
          'HTTP %s %s' % (status, s3_code(body)))
    status, _, body = signed('GET', path, region='eu-west-1')
    check('credential scope with another region rejected', status == 400,
          'HTTP %s %s' % (status, s3_code(body)))
    status, _, body = signed('PUT', path, b'abc', payload_hash='STREAMING-AWS4-HMAC-SHA256-PAYLOAD',
                             headers={'Content-Encoding': 'aws-chunked',
                                      'x-amz-decoded-content-length': '3'})
    check('aws-chunked streaming upload (expected: not supported)', status == 501,
          'HTTP %s %s' % (status, s3_code(body)))
    skewed = datetime.datetime.utcnow() - datetime.timedelta(minutes=20)
    with mock.patch.object(botocore.auth.datetime, 'datetime',
                           mock.Mock(wraps=datetime.datetime, utcnow=lambda: skewed)):
        status, _, body = signed('GET', path)
    check('request dated 20 minutes ago rejected', status == 403,
          'HTTP %s %s' % (status, s3_code(body)))

    url = s3.generate_presigned_url('get_object', Params={'Bucket': BUCKET, 'Key': 'sig'},
                                    ExpiresIn=300)
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read()
    check('presigned GET URL', body == b'abc', repr(body))
    try:
        urllib.request.urlopen(url.replace('X-Amz-Signature=', 'X-Amz-Signature=0'), timeout=30)
        status = 200
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    check('tampered presigned URL rejected', status == 403, 'HTTP %s %s' % (status, s3_code(body)))
    s3.delete_object(Bucket=BUCKET, Key='sig')


def test_virtual_host():
    host = '%s.localhost:%d' % (BUCKET, PORT)
    status, _, _ = signed('PUT', '/vkey', b'virtual', host=host)
    check('virtual-hosted PUT (Host: BUCKET.localhost:PORT)', status == 200, 'HTTP %s' % status)
    status, _, body = signed('GET', '/vkey', host=host)
    check('virtual-hosted GET', status == 200 and body == b'virtual', 'HTTP %s %r' % (status, body))
    status, _, body = signed('GET', '/?list-type=2', host=host)
    check('virtual-hosted ListObjectsV2', status == 200 and b'<Key>vkey</Key>' in body,
          'HTTP %s' % status)
    status, _, body = signed('GET', '/%s/vkey' % BUCKET, host='localhost:%d' % PORT)
    check('path-style with Host: localhost:PORT', status == 200 and body == b'virtual',
          'HTTP %s' % status)
    status, _, _ = signed('DELETE', '/vkey', host=host)
    check('virtual-hosted DELETE', status == 204, 'HTTP %s' % status)


def main():
    print('endpoint %s, access key %s, region %s, bucket %s'
          % (ENDPOINT, ACCESS_KEY, REGION, BUCKET))
    s3 = client()
    try:
        test_objects(s3)
        test_listing(s3)
        test_multipart(s3)
        test_signatures(s3)
        test_virtual_host()
        status, code = error_of(lambda: s3.delete_bucket(Bucket=BUCKET))
        check('DELETE empty bucket', status == 204, 'HTTP %s' % status)
    except Exception as e:  # an unexpected error is one more failed check
        check('unexpected %s' % type(e).__name__, False, str(e))
    if failures:
        print('%d check(s) FAILED: %s' % (len(failures), ', '.join(failures)))
        return 1
    print('all checks passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
