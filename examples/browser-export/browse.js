// Drives Debian's chromium with Playwright (playwright-core, no browser
// download) through the partner's back-office:
//   node browse.js text    logs in and prints the orders page's text
//   node browse.js export  logs in, clicks "Export CSV" and saves the
//                          download, made by the page's JavaScript, as
//                          in/export.csv
// PARTNER_URL, PARTNER_USER and PARTNER_PASSWORD come from the step's env;
// NODE_PATH finds playwright-core (/opt/airlock-browser/node_modules). In a
// networked step the browser goes through the worker's proxy: the chromium
// wrapper's settings in the step's view pass it --proxy-server.
const fs = require('fs');
const { chromium } = require('playwright-core');

async function main(mode) {
  const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium' });
  try {
    const page = await browser.newPage();
    await page.goto(process.env.PARTNER_URL + '/');
    await page.fill('input[name=user]', process.env.PARTNER_USER || '');
    await page.fill('input[name=password]', process.env.PARTNER_PASSWORD || '');
    await Promise.all([page.waitForURL('**/orders'), page.click('button[type=submit]')]);
    if (mode === 'text') {
      // The page fills its summary and its analytics line by scripts:
      // wait until both have settled.
      await page.waitForFunction(() => !/Loading|sending/.test(document.body.innerText));
      console.log(await page.innerText('body'));
      return;
    }
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('text=Export CSV')]);
    fs.mkdirSync('in', { recursive: true });
    await download.saveAs('in/export.csv');
    console.log(`saved ${download.suggestedFilename()} as in/export.csv: ${fs.statSync('in/export.csv').size} bytes`);
  } finally {
    await browser.close();
  }
}

main(process.argv[2] || 'export').catch((e) => {
  console.error(e.message);
  process.exit(1);
});
