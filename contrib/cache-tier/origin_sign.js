// The cache tier's requests to a private origin (contrib/cache-tier, docs/cache-tier.md), signed
// in nginx by njs (Debian's libnginx-mod-http-js 0.7): the tier alone holds the origin's
// credentials, read from its environment (nginx's `env` directives), never from its config.
//
//   S3:    AWS Signature V4 over GET, the encoded path, host, x-amz-content-sha256, x-amz-date
//          (and x-amz-security-token with temporary keys); Range is left unsigned, as S3 allows.
//   Azure: the SAS in AZURE_STORAGE_SAS_TOKEN appended as the query of every request.
//
// Each function is a js_set variable of one upstream request: $origin_uri (the object's path,
// encoded once here and sent as is), $origin_amz_date and $origin_authorization. The date comes
// from $msec, nginx's time cached for one pass of its event loop, so the header and the
// signature of one request always agree.

const crypto = require('crypto');

const EMPTY_SHA256 = 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855';

// S3's URI encoding: every byte but A-Z a-z 0-9 - . _ ~ and the path's slashes as %XX.
function encodePath(path) {
    const bytes = Buffer.from(path, 'utf8');
    let out = '';
    for (let i = 0; i < bytes.length; i++) {
        const c = bytes[i];
        const ch = String.fromCharCode(c);
        if (/[A-Za-z0-9\-._~\/]/.test(ch)) {
            out += ch;
        } else {
            out += '%' + (c < 16 ? '0' : '') + c.toString(16).toUpperCase();
        }
    }
    return out;
}

// The origin path of this request: the configured prefix and the object key the location
// captured ($origin_key, decoded by nginx).
function uri(r) {
    return encodePath(r.variables.origin_prefix + r.variables.origin_key);
}

function amzDate(r) {
    const d = new Date(Math.floor(parseFloat(r.variables.msec)) * 1000);
    return d.toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');
}

function hmac(key, text) {
    return crypto.createHmac('sha256', key).update(text).digest();
}

function sha256hex(text) {
    return crypto.createHash('sha256').update(text).digest('hex');
}

function authorization(r) {
    const accessKey = process.env.AWS_ACCESS_KEY_ID;
    const secretKey = process.env.AWS_SECRET_ACCESS_KEY;
    const token = process.env.AWS_SESSION_TOKEN;
    if (!accessKey || !secretKey) {
        r.error('cache tier: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set: ' +
                'the origin request goes unsigned');
        return '';
    }
    const date = amzDate(r);
    const day = date.slice(0, 8);
    const region = r.variables.origin_region;
    const scope = day + '/' + region + '/s3/aws4_request';
    let names = ['host', 'x-amz-content-sha256', 'x-amz-date'];
    let canonicalHeaders = 'host:' + r.variables.origin_host + '\n' +
        'x-amz-content-sha256:' + EMPTY_SHA256 + '\n' +
        'x-amz-date:' + date + '\n';
    if (token) {
        names.push('x-amz-security-token');
        canonicalHeaders += 'x-amz-security-token:' + token + '\n';
    }
    const signed = names.join(';');
    const canonicalRequest = ['GET', uri(r), '', canonicalHeaders, signed, EMPTY_SHA256]
        .join('\n');
    const stringToSign = ['AWS4-HMAC-SHA256', date, scope, sha256hex(canonicalRequest)]
        .join('\n');
    let key = hmac('AWS4' + secretKey, day);
    key = hmac(key, region);
    key = hmac(key, 's3');
    key = hmac(key, 'aws4_request');
    const signature = crypto.createHmac('sha256', key).update(stringToSign).digest('hex');
    return 'AWS4-HMAC-SHA256 Credential=' + accessKey + '/' + scope + ', SignedHeaders=' +
        signed + ', Signature=' + signature;
}

function securityToken(r) {
    return process.env.AWS_SESSION_TOKEN || '';
}

// Azure: '?' and the SAS, or nothing.
function azureQuery(r) {
    const sas = (process.env.AZURE_STORAGE_SAS_TOKEN || '').replace(/^\?/, '');
    return sas ? '?' + sas : '';
}

export default {uri, amzDate, authorization, securityToken, azureQuery};
