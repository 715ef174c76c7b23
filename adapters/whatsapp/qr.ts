/** Renders the linking QR in the terminal; qrcode-terminal is loaded only when a QR is actually shown. */
export async function printQrToTerminal(qr: string): Promise<void> {
  const { default: qrcode } = await import("qrcode-terminal");
  qrcode.generate(qr, { small: true }, (rendered) => process.stdout.write(`${rendered}\n`));
}
