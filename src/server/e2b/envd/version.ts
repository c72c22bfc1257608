/**
 * The envd version sbx advertises to the e2b SDK (`envdVersion`). The SDK gates features on it:
 * ≥ 0.3.0 lets a command say `stdin: false`, ≥ 0.4.0 leaves the user to the sandbox's default,
 * ≥ 0.5.2 has closeStdin, ≥ 0.5.7 uploads as application/octet-stream, ≥ 0.6.2 sends file
 * metadata on writes (X-Metadata-* headers) and reads owner, group and symlink targets, ≥ 0.6.3
 * asks for entry info in watch events (`includeEntry`), ≥ 0.6.4 may pass `allowNetworkMounts` to
 * a watch (sbx refuses no mount, so the flag changes nothing). sbx serves all of those, in both
 * SDKs (npm 2.51, Python 2.63 gate on the same versions).
 */
export const ENVD_VERSION = '0.6.4';
